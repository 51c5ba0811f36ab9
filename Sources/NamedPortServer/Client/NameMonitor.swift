import Glibc
import PermanentThread
import PortMessaging
import PortKitLocks

/// A monitor of the traffic to and from names: every message on each connection the server
/// brokers to a monitored name while the monitor lasts, as the server relays it
/// (`NameServerClient.monitor(_:)`; docs/NAMES.md says which traffic that is, and what it
/// costs). `for try await event in monitor { … }`.
///
/// The events come to a port of the monitor's own on the process's shared reply loop, and
/// wait there until taken. A monitor that falls far behind (the server's message to its
/// port not taken at once) is ended by the server, as a watch is.
public final class NameMonitor: Sendable {
    /// The names and prefixes (ending in `*`) monitored, as asked.
    public let patterns: [String]
    /// The names they matched when the monitor started, sorted by name.
    public let initialOwners: [NameOwner]
    private let port: ReceivePort
    private let messages: ReceivedMessages
    /// Why the events ended, once they did from the server's side.
    private let end: Locked<NameServerError?>

    init(
        patterns: [String], initialOwners: [NameOwner], port: ReceivePort, messages: ReceivedMessages,
        end: Locked<NameServerError?>
    ) {
        self.patterns = patterns
        self.initialOwners = initialOwners
        self.port = port
        self.messages = messages
        self.end = end
    }

    deinit {
        cancel()
    }

    /// Ends the monitor: its port is closed, which the server sees and stops sending to it;
    /// the iteration returns `nil`. Safe to call more than once, from any thread.
    public func cancel() {
        port.invalidate()
    }

    /// Checks a pattern a monitor may take: a name (``NameRules``), or a prefix followed by
    /// `*` (`"*"` alone matches every name).
    /// - Throws: `invalidName`.
    public static func validate(pattern: String) throws(NameServerError) {
        if pattern.hasSuffix("*") {
            try NameRules.validatePrefix(String(pattern.dropLast()))
        } else {
            try NameRules.validate(pattern)
        }
    }

    /// The receiving side of a new monitor: a port on `loop` whose iteration has begun (so
    /// the server's connection into it is read from its first event), and where its end is
    /// recorded: the server closing the connection ends the iteration with `connectionLost`.
    static func receiving(
        on loop: ThreadLoop, address: String
    ) throws(NameServerError) -> (ReceivePort, ReceivedMessages, Locked<NameServerError?>) {
        let port = ReceivePort()
        let end = Locked<NameServerError?>(nil)
        port.onPeerEvent { [weak port] event in
            guard case .disconnected = event else { return }
            end.withLock { $0 = $0 ?? .connectionLost(address: address) }
            port?.invalidate()
        }
        do {
            return (port, try port.messages(on: loop), end)
        } catch {
            port.invalidate()
            throw .transport(error)
        }
    }
}

extension NameMonitor: AsyncSequence {
    /// Each message the monitor saw, in the order the server relayed them.
    public typealias Element = MonitoredMessage
    /// Why the events ended: the server went or ended the monitor (`connectionLost`), or
    /// an event could not be read (`protocolError`).
    public typealias Failure = NameServerError

    /// Iterates a monitor's events.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let monitor: NameMonitor
        var messages: ReceivedMessages.Iterator

        /// The next event, suspending the task until it comes; `nil` once the monitor is
        /// cancelled (`NameMonitor.cancel()`) or the task is.
        public mutating func next() async throws(NameServerError) -> MonitoredMessage? {
            try event(from: await messages.next())
        }

        /// The next event, as `next()`, resuming on `actor`.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(NameServerError) -> MonitoredMessage? {
            try event(from: await messages.next(isolation: actor))
        }

        /// The event a received message carries; at the end, `nil` or why it ended.
        private func event(from received: ReceivedMessage?) throws(NameServerError) -> MonitoredMessage? {
            guard let received else {
                if let end = monitor.end.withLock({ $0 }) { throw end }
                return nil
            }
            received.message.discardAttachments()
            return try MonitorEventCodec.decode(received.message)
        }
    }

    /// An iterator over the events; one iteration per monitor.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(monitor: self, messages: messages.makeAsyncIterator())
    }
}
