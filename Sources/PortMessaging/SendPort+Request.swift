import PermanentThread
import PortKitSystem

/// A request that was sent: the one core every request form shares. `SendPort.start`
/// begins it (a sequence number in its connection's request table, or a reply slot
/// in-process) and writes it; a form then waits for its reply in one of three shapes and
/// ends it:
///
/// - blocking (`SendPort.blockingRequest`, and a name client's pipelined calls): `reply(timeout:)`
///   blocks the thread, which reads the reply itself when no loop reads the connection;
/// - suspended (the async `SendPort.request`): `reply(receiveTimeout:)` suspends the task in
///   the request's `AsyncReply`, which its reply, its time-out, its connection's close or the
///   task's cancellation resumes;
/// - handed to a closure (`SendPort.request(_:…:completion:)`): `armTimeout(_:)`, and the
///   `AsyncReply`'s handler is called with the outcome.
///
/// Over a connection, replies are matched to their requests by sequence number: any number
/// may be in flight, and a reply read by another requester's thread is kept for this one.
package struct SentRequest: Sendable {
    fileprivate enum Route: Sendable {
        case local(ReplySlot, ReceivePort)
        case connection(Connection, sequence: UInt64)
    }

    fileprivate let route: Route
    /// When the request was sent: its receive timeout counts from then. `nil` for an
    /// in-process request collected at once (a blocking one): it counts from when the wait
    /// begins, with no clock reading for it.
    fileprivate let sent: ContinuousClock.Instant?
    /// The wait of a suspended or handed-over request; `nil` for a blocking one.
    private let waiter: AsyncReply?

    fileprivate init(route: Route, sent: ContinuousClock.Instant?, waiter: AsyncReply?) {
        self.route = route
        self.sent = sent
        self.waiter = waiter
    }

    /// The reply, blocking until `timeout` after the request was sent (`nil`: as long as it
    /// takes). Once it returns or throws anything but `.receiveTimedOut`, the request is
    /// over; after a time-out it may be asked again, or ended with `end()`.
    /// - Throws: `.receiveTimedOut`, `.peerDied`, `.invalidPort`, `.noReply`.
    package func reply(timeout: Duration?) throws(PortError) -> Message {
        switch route {
        case .local(let slot, let port):
            let left = timeout.map { timeout in sent.map { $0 + timeout - .now } ?? timeout }
            return try Self.awaitLocalReply(slot, from: port, timeout: left)
        case .connection(let connection, let sequence):
            do {
                let reply = try connection.awaitReply(sequence, sent: sent ?? .now, timeout: timeout)
                connection.endRequest(sequence)
                return reply
            } catch .receiveTimedOut {
                throw .receiveTimedOut
            } catch {
                connection.endRequest(sequence)
                throw error
            }
        }
    }

    /// Waits for at most `timeout` (`nil`: as long as it takes) for the reply an in-process
    /// request's `slot` gets from `port`.
    private static func awaitLocalReply(_ slot: ReplySlot, from port: ReceivePort, timeout: Duration?) throws(PortError) -> Message {
        if let (loop, mode) = port.loopIfCurrent {
            // The receiver runs on this very thread: run its loop until the reply is in.
            let deadline = timeout.map { ContinuousClock.now + $0 }
            while slot.result == nil, deadline.map({ ContinuousClock.now < $0 }) ?? true {
                try loop.runForWait(in: mode, until: deadline)
            }
            guard let result = slot.result else { throw .receiveTimedOut }
            return try result.get()
        }
        guard let result = slot.wait(timeout: timeout) else { throw .receiveTimedOut }
        return try result.get()
    }

    /// The reply of a suspended request: arms its receive timeout and suspends the task
    /// until the request's wait ends; the request is over then.
    /// - Throws: `.cancelled`, `.receiveTimedOut`, `.peerDied`, `.invalidPort`, `.noReply`;
    ///   `.system` when the shared reply thread cannot be started.
    nonisolated(nonsending) func reply(receiveTimeout: Duration?) async throws(PortError) -> Message {
        guard let waiter else { preconditionFailure("a blocking request has no wait to suspend in") }
        defer { end() }
        armTimeout(receiveTimeout)
        return try await waiter.outcome().get()
    }

    /// Ends the request's wait with `receiveTimedOut` once `timeout` has passed since it was
    /// sent (`nil`: never), by a timer on the loop that hands its reply over (starting what
    /// reads the replies); if that cannot start, the wait ends at once with the failure.
    func armTimeout(_ timeout: Duration?) {
        guard let waiter else { return }
        switch route {
        case .local(_, let port):
            // In-process, the wait's own timer, on the receiving port's loop.
            do throws(PortError) {
                try waiter.timeOut(at: timeout.map { .now + $0 }, on: port.scheduledLoop)
            } catch {
                waiter.finish(.failure(error))
            }
        case .connection(let connection, let sequence):
            // Over a connection, its one deadline timer, shared by its requests.
            connection.timeOut(sequence, waiter, after: timeout, from: sent ?? .now)
        }
    }

    /// Gives the request up: a reply that came or comes is dropped (its descriptors closed).
    package func end() {
        switch route {
        case .local(let slot, _):
            if case .success(let message)? = slot.result { FileDescriptor.close(message.descriptors) }
        case .connection(let connection, let sequence):
            connection.endRequest(sequence)
        }
    }
}

extension SendPort {
    /// Begins a request and writes it, waiting for room up to `sendTimeout`; the returned
    /// `SentRequest` waits for its reply. `waiter`, when given, is the wait its reply
    /// resumes (a suspended or handed-over request); without one, the request is collected
    /// by blocking. On a throw the request is over and `waiter` was given no outcome by it
    /// (though a connection's close may have ended `waiter` meanwhile).
    /// - Throws: when the request could not be sent: `.sendTimedOut`, `.peerDied`,
    ///   `.invalidPort`, `.messageTooLarge`, `.cannotCrossHosts`.
    func start(_ message: Message, waiter: AsyncReply? = nil, sendTimeout: Duration?) throws(PortError) -> SentRequest {
        try checkValid()
        switch route {
        case .local(let port):
            // The clock is read for the send deadline only if the queue is full.
            let slot = ReplySlot(waiter: waiter)
            try port.enqueue(
                .init(message: try Self.localCopy(of: message, limit: port.maxMessageBytes), reply: slot),
                timeout: { sendTimeout.map { ContinuousClock.now + $0 } })
            return SentRequest(route: .local(slot, port), sent: nil, waiter: waiter)
        case .connection(let connection):
            // One clock reading for both deadlines, unless sending had to wait.
            let start = ContinuousClock.now
            let sequence = connection.beginRequest(waiter: waiter)
            do {
                let waited = try write(message, kind: .request, sequence: sequence, on: connection, deadline: sendTimeout.map { start + $0 })
                // The receive timeout counts from when the request is sent.
                return SentRequest(route: .connection(connection, sequence: sequence), sent: waited ? .now : start, waiter: waiter)
            } catch {
                connection.endRequest(sequence)
                throw error
            }
        }
    }

    /// Sends a request and returns at once, without waiting for its reply: the returned
    /// `SentRequest` collects it (`reply(timeout:)`), which lets a client send a second
    /// request behind the first (a name client's hello and its first call go out together).
    /// Sending is as `blockingRequest(_:sendTimeout:receiveTimeout:)`'s.
    /// - Throws: when the request could not be sent: `.sendTimedOut`, `.peerDied`,
    ///   `.invalidPort`, `.messageTooLarge`, `.cannotCrossHosts`.
    package func send(request message: Message, sendTimeout: Duration? = SendPort.defaultTimeout) throws(PortError) -> SentRequest {
        let request = try start(message, sendTimeout: sendTimeout)
        // Collected later: an in-process request's receive timeout counts from now too.
        guard request.sent == nil else { return request }
        return SentRequest(route: request.route, sent: .now, waiter: nil)
    }
}

extension ReceivePort {
    /// The loop the port is scheduled on, if it is.
    var scheduledLoop: ThreadLoop? { state.withLock { $0.schedule?.loop } }
}
