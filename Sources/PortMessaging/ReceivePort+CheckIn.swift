import PermanentThread

/// A port as a boss: the check-ins of its workers (`PortCheckIn`).
extension ReceivePort {
    /// Whether a worker's check-in (`PortCheckIn.checkIn`) reaches this port's handler as a
    /// message, as NSMachPort code that switches on message id 100 expects: its `id` the
    /// check-in's, its `replyPort` the worker's port. Then `PortCheckIn.awaitWorker` does
    /// not see it. Off by default (the check-in waits for `awaitWorker`).
    public var handsCheckInsToHandler: Bool {
        get { checkInsToHandler.load(ordering: .acquiring) }
        set { checkInsToHandler.store(newValue, ordering: .releasing) }
    }

    /// A worker checked in with `port`: to the handler, or to `awaitCheckIn`.
    func checkedIn(_ port: SendPort, id: UInt32, sender: SenderCredentials?, handler: Handler) {
        if handsCheckInsToHandler {
            var message = Message(id: id, replyPort: port)
            message.sender = sender
            handler.handle(message, answer: nil)
            return
        }
        checkIns.withLock { $0.append(port) }
        checkIns.broadcast()
    }

    /// Waits for the next check-in on this port (running the port's loop if it is the
    /// calling thread's).
    func awaitCheckIn(deadline: ContinuousClock.Instant) throws(PortError) -> SendPort {
        guard let schedule = state.withLock({ $0.schedule }) else { throw .notScheduled }
        let take: (inout [SendPort]) -> SendPort? = { $0.isEmpty ? nil : $0.removeFirst() }
        if schedule.loop.isCurrent {
            while true {
                if let port = checkIns.withLock(take) { return port }
                guard isValid else { throw .invalidPort }
                if ContinuousClock.now >= deadline { throw .receiveTimedOut }
                try schedule.loop.runForWait(in: schedule.modes.first ?? .default, until: deadline)
            }
        }
        guard let port = checkIns.wait(until: deadline, take) else { throw .receiveTimedOut }
        return port
    }
}
