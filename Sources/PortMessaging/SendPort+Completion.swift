import PermanentThread
import PortKitLocks

extension SendPort {
    /// Sends a request and returns at once; `completion` is called with its reply, or with
    /// why there is none, exactly once. For code that answers from a loop and must not wait
    /// there (a relay that passes requests on and their replies back, say): no thread and
    /// no task waits for the reply.
    ///
    /// `completion` runs on the thread that brings the outcome, as the async
    /// `request(_:sendTimeout:receiveTimeout:)`'s task is resumed: the loop that read the
    /// reply (the receiving port's in-process; over a connection, the loop of the port it
    /// is bound to, else the shared `portkit-replies` thread), the loop whose timer ended
    /// the wait, or the thread that closed the connection. Keep it short, and never wait
    /// in it for another reply.
    ///
    /// Sending is as the blocking `request`'s: while the receiver is full, the call waits
    /// for room up to `sendTimeout`, blocking its thread.
    /// - Parameters:
    ///   - message: the request to send.
    ///   - sendTimeout: how long to wait for room to send; `nil` as long as it takes.
    ///   - receiveTimeout: how long to wait for the reply once sent; `nil` as long as it
    ///     takes. Its end calls `completion` with `.receiveTimedOut`.
    ///   - completion: given the reply, or `.receiveTimedOut`, `.noReply`, `.peerDied`.
    /// - Throws: when the request could not be sent (then `completion` is never called):
    ///   `.sendTimedOut`, `.peerDied`, `.invalidPort`, `.messageTooLarge`,
    ///   `.cannotCrossHosts`; `.system` when the shared reply thread cannot be started.
    public func request(
        _ message: Message, sendTimeout: Duration? = SendPort.defaultTimeout, receiveTimeout: Duration? = SendPort.defaultTimeout,
        completion: @escaping @Sendable (Result<Message, PortError>) -> Void
    ) throws(PortError) {
        let waiter = AsyncReply(handler: completion)
        let request: SentRequest
        do { request = try start(message, waiter: waiter, sendTimeout: sendTimeout) } catch {
            // Unless the connection's close has handed `completion` its failure already.
            if waiter.abandon() { throw error }
            return
        }
        // The request's entry goes with its outcome: a reply or a time-out takes it out of
        // the connection's table, and a close fails the whole table.
        request.armTimeout(receiveTimeout)
    }
}

extension SendPort {
    /// Has `loop` read the replies to this port's async and completion-handler requests,
    /// instead of the process's shared `portkit-replies` thread: a completion handler then
    /// runs on `loop`, and code that answers from that loop (a relay passing replies back)
    /// saves a thread's wake-up per request, and a task on `loop`'s thread that awaits a
    /// request is resumed there in the same pass. Call it before the first such request;
    /// once a loop reads the replies, it keeps doing so, until its thread ends: the shared
    /// thread then reads them from there on (the waiting requests keep their receive
    /// timeouts), so stopping the thread first loses nothing. Nothing to do for an in-process port
    /// (its receiving port's loop hands the replies over) or for a port whose connection a
    /// receive port reads already.
    /// - Throws: `.invalidPort`; `.system` when the connection cannot be watched.
    public func readReplies(on loop: ThreadLoop) throws(PortError) {
        try checkValid()
        guard case .connection(let connection) = route else { return }
        try connection.readReplies(on: loop)
    }
}
