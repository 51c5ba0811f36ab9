import PermanentThread

/// The two-way check-in protocol of the seeds, one call per side, the same for a worker
/// thread and a worker process.
///
/// The boss makes a receive port, schedules it, and starts a worker with a send port to it
/// (`makeSendPort()` for a thread; `ChildWorker.spawn` for a process). The worker makes its
/// own receive port and calls `checkIn(to:from:)`; the boss calls `awaitWorker(on:)`, which
/// returns the worker's send port. Both then message each other.
public enum PortCheckIn {
    /// The message id of a check-in unless configured: 100, as in the seeds.
    public static let defaultMessageID: UInt32 = 100

    /// Worker side: tells the boss where the worker receives.
    /// - Parameters:
    ///   - boss: the send port the boss handed down.
    ///   - port: the worker's own receive port (scheduled, so the boss's messages arrive).
    ///   - id: the check-in message id; 100 by default.
    ///   - timeout: how long to wait for room to send.
    /// - Throws: `PortError` (`sendTimedOut`, `peerDied`, `invalidPort`).
    public static func checkIn(
        to boss: SendPort, from port: ReceivePort, id: UInt32 = defaultMessageID, timeout: Duration = .seconds(10)
    ) throws(PortError) {
        try boss.sendCheckIn(id: id, from: port, deadline: .now + timeout)
    }

    /// Boss side: waits for the next worker to check in on `port` and returns its send port.
    /// Runs the port's loop while waiting when that loop is the calling thread's.
    /// - Throws: `.receiveTimedOut`, `.notScheduled`, `.invalidPort`.
    public static func awaitWorker(on port: ReceivePort, timeout: Duration = .seconds(10)) throws(PortError) -> SendPort {
        try port.awaitCheckIn(deadline: .now + timeout)
    }
}
