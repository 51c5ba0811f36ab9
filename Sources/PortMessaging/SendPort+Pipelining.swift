import PermanentThread
import PortKitSystem

/// A request that was sent and whose reply is collected later, by `reply(timeout:)`: what
/// lets a client send a second request behind the first without waiting for the first's
/// reply (a name client's hello and its first call go out together).
///
/// Over a connection, replies are matched to their requests by sequence number: a reply
/// that comes while another request's requester reads the connection is kept for this one.
package struct SentRequest: Sendable {
    private enum Route: Sendable {
        case local(ReplySlot, ReceivePort)
        case connection(Connection, sequence: UInt64)
    }

    private let route: Route
    /// When the request was sent: its receive timeout counts from then.
    private let sent: ContinuousClock.Instant

    fileprivate init(local slot: ReplySlot, port: ReceivePort, sent: ContinuousClock.Instant) {
        route = .local(slot, port)
        self.sent = sent
    }

    fileprivate init(on connection: Connection, sequence: UInt64, sent: ContinuousClock.Instant) {
        route = .connection(connection, sequence: sequence)
        self.sent = sent
    }

    /// The reply, waiting for it until `timeout` after the request was sent (`nil`: as long
    /// as it takes). Call it once; once it returns or throws anything but
    /// `.receiveTimedOut`, the request is over (after a time-out it may be asked again, or
    /// `abandon`ed).
    /// - Throws: `.receiveTimedOut`, `.peerDied`, `.invalidPort`, `.noReply`.
    package func reply(timeout: Duration?) throws(PortError) -> Message {
        switch route {
        case .local(let slot, let port):
            return try SendPort.awaitLocalReply(slot, from: port, timeout: timeout.map { sent + $0 - .now })
        case .connection(let connection, let sequence):
            do {
                let reply = try connection.awaitReply(sequence, sent: sent, timeout: timeout)
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

    /// Gives the request up: a reply that came or comes is dropped (its descriptors closed).
    package func abandon() {
        switch route {
        case .local(let slot, _):
            if case .success(let message)? = slot.result { FileDescriptor.close(message.descriptors) }
        case .connection(let connection, let sequence):
            connection.endRequest(sequence)
        }
    }
}

extension SendPort {
    /// Sends a request and returns at once, without waiting for its reply: the returned
    /// `SentRequest` collects it. Sending is as `blockingRequest(_:sendTimeout:receiveTimeout:)`'s.
    /// - Throws: when the request could not be sent: `.sendTimedOut`, `.peerDied`,
    ///   `.invalidPort`, `.messageTooLarge`, `.cannotCrossHosts`.
    package func send(request message: Message, sendTimeout: Duration? = SendPort.defaultTimeout) throws(PortError) -> SentRequest {
        try checkValid()
        let start = ContinuousClock.now
        let sendDeadline = sendTimeout.map { start + $0 }
        switch route {
        case .local(let port):
            let slot = try Self.enqueueLocalRequest(message, on: port) { sendDeadline }
            return SentRequest(local: slot, port: port, sent: .now)
        case .connection(let connection):
            let sequence = connection.beginRequest()
            do {
                let waited = try write(message, kind: .request, sequence: sequence, on: connection, deadline: sendDeadline)
                return SentRequest(on: connection, sequence: sequence, sent: waited ? .now : start)
            } catch {
                connection.endRequest(sequence)
                throw error
            }
        }
    }
}
