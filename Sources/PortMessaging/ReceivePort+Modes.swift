import PermanentThread

/// A scheduled port's modes, one by one (NSPort's `scheduleInRunLoop:forMode:` and
/// `removeFromRunLoop:forMode:`): its queue, its connections and its listener follow.
extension ReceivePort {
    /// The modes the port is scheduled in, in the order they were added; empty before
    /// `schedule`.
    public var modes: [LoopMode] { state.withLock { $0.schedule?.modes ?? [] } }

    /// Adds the scheduled port to `mode` too, on the loop it is scheduled on: messages are
    /// then handled while the loop runs in that mode as well. Adding a mode it is in
    /// already does nothing. Callable from any thread (the loop carries it out on its next
    /// pass).
    /// - Throws: `.notScheduled`, `.invalidPort` (invalidated, or its loop ended).
    public func add(toMode mode: LoopMode) throws(PortError) {
        guard let (schedule, connections, listener) = try changeModes({ modes in
            guard !modes.contains(mode) else { return false }
            modes.append(mode)
            return true
        }) else { return }
        do {
            try schedule.loop.add(schedule.source, forMode: mode)
        } catch {
            throw .invalidPort
        }
        for connection in connections {
            if let source = connection.boundSource { try? schedule.loop.add(source, forMode: mode) }
        }
        listener?.change(mode, adding: true)
    }

    /// Takes the scheduled port out of `mode`: while the loop runs in that mode, messages
    /// wait (senders see the port's usual backpressure) until it runs in one of the port's
    /// other modes. A port out of every mode receives nothing until it is added to one.
    /// Removing a mode it is not in does nothing. Callable from any thread.
    public func remove(fromMode mode: LoopMode) {
        guard let (schedule, connections, listener) = try? changeModes({ modes in
            guard let index = modes.firstIndex(of: mode) else { return false }
            modes.remove(at: index)
            return true
        }) else { return }
        schedule.loop.remove(schedule.source, forMode: mode)
        for connection in connections {
            if let source = connection.boundSource { schedule.loop.remove(source, forMode: mode) }
        }
        listener?.change(mode, adding: false)
    }

    /// Changes the schedule's modes with `change` (which says whether it changed them), and
    /// returns what then must follow: nothing when `change` did not change them.
    private func changeModes(
        _ change: (inout [LoopMode]) -> Bool
    ) throws(PortError) -> (Schedule, [Connection], PortListener?)? {
        try state.withLock { (state) throws(PortError) -> (Schedule, [Connection], PortListener?)? in
            guard state.valid else { throw .invalidPort }
            guard var schedule = state.schedule else { throw .notScheduled }
            guard change(&schedule.modes) else { return nil }
            state.schedule = schedule
            return (schedule, Array(state.connections.values), state.listener)
        }
    }
}
