import PermanentThread

extension SendPort {
    /// Sends a request and suspends the calling task until its reply
    /// (CFMessagePortSendRequest, without parking a thread): the receiving port's handler,
    /// or its consumer through `ReceivedMessage.reply`, answers it.
    ///
    /// No thread waits for the reply. It is handed to the task by the loop that reads it:
    /// the receiving port's loop in-process; for a connection to another process, the loop
    /// of the port the connection is bound to, else one shared thread of the process
    /// (`portkit-replies`, started by the first async request that needs it), which then
    /// reads that connection from then on. The receive timeout is a timer on that loop (one
    /// per connection, at its earliest deadline: a stream of requests arms it once).
    ///
    /// **Cancellation.** Cancelling the task ends the wait at once (within the cancelling
    /// thread's call) with `PortError.cancelled`; a task cancelled before the call sends
    /// nothing. A reply that comes after the wait ended is dropped (its descriptors closed):
    /// each request waits for its own reply only, so it never reaches a later request on the
    /// same port. Sending itself is as `blockingRequest`'s: while the receiver is full, the call
    /// waits for room up to `sendTimeout`, blocking its thread, and cancellation does not end
    /// that wait.
    /// - Parameters:
    ///   - message: the request to send.
    ///   - sendTimeout: how long to wait for room to send; `nil` as long as it takes.
    ///   - receiveTimeout: how long to wait for the reply once sent; `nil` as long as it takes.
    /// - Throws: `.cancelled` (the task was cancelled), and what
    ///   `blockingRequest(_:sendTimeout:receiveTimeout:)` throws: `.sendTimedOut`,
    ///   `.receiveTimedOut`, `.noReply`, `.peerDied`, `.invalidPort`, `.messageTooLarge`;
    ///   `.system` when the shared reply thread cannot be started.
    public func request(
        _ message: Message, sendTimeout: Duration? = SendPort.defaultTimeout, receiveTimeout: Duration? = SendPort.defaultTimeout
    ) async throws(PortError) -> Message {
        if Task.isCancelled { throw .cancelled }
        return try await start(message, waiter: AsyncReply(), sendTimeout: sendTimeout).reply(receiveTimeout: receiveTimeout)
    }
}
