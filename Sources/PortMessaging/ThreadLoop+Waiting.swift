import PermanentThread

extension ThreadLoop {
    /// One step of a blocking wait made on the loop's own thread (for a reply, a check-in,
    /// a watch's event): runs the loop in `mode` until it handled a source or `deadline`
    /// passed (`nil`: an hour at most; the caller loops until what it waits for is in).
    /// - Throws: `PortError.loop` when the loop failed: the wait cannot go on.
    package func runForWait(in mode: LoopMode, until deadline: ContinuousClock.Instant?) throws(PortError) {
        do {
            _ = try run(mode: mode, until: deadline ?? .now + .seconds(3600), returnAfterSourceHandled: true)
        } catch {
            throw .loop(error)
        }
    }
}
