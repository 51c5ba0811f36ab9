import Glibc
import PortMessaging

/// One message a monitor saw on a tapped connection to a monitored name, or a tapped
/// connection's start or end (`NameServerClient.monitor(_:)`).
public struct MonitoredMessage: Sendable, Hashable {
    /// What the server relayed.
    public enum Kind: UInt8, Sendable {
        /// A request to the name's owner; its reply, or `noReply`, has the same `correlation`.
        case request = 0
        /// The owner's reply to the request with the same `correlation`.
        case reply = 1
        /// A one-way message to the owner.
        case message = 2
        /// The owner gave the request with the same `correlation` up without a reply, or
        /// the looker could not be given the reply.
        case noReply = 3
        /// The server brokered a tapped connection to the name: `sender` is the looker.
        case opened = 4
        /// A tapped connection ended (either side closed or died); the tap closed both.
        case closed = 5
    }

    /// Which way a message went.
    public enum Direction: UInt8, Sendable {
        /// From the looker to the name's owner.
        case toName = 0
        /// From the name's owner to the looker.
        case fromName = 1
    }

    /// One component of a monitored message, as the monitor sees it: its kind and size,
    /// never its content.
    public enum Component: Sendable, Hashable {
        /// Bytes, and how many.
        case bytes(count: Int)
        /// A port (a connection brokered on to the receiver, not through the tap).
        case port
        /// A file descriptor.
        case descriptor
    }

    /// The monitored name the connection was brokered to.
    public var name: String
    /// The server's number for the tapped connection: every event of one connection has it.
    public var connection: UInt64
    /// What happened.
    public var kind: Kind
    /// Which way the message went (`toName` for `opened` and `closed`).
    public var direction: Direction
    /// The message's id (0 for `opened`, `closed` and `noReply`).
    public var id: UInt32
    /// Ties a request to its reply: the request's number on its connection, from 1; 0 for a
    /// one-way message, `opened` and `closed`.
    public var correlation: UInt64
    /// Who sent it, as the kernel named the sender to the server (the looker for `opened`).
    public var sender: SenderCredentials?
    /// When the server relayed it: the system's real-time clock, since the Unix epoch.
    public var time: Duration
    /// The message's components, in order.
    public var components: [Component]
    /// Whether the message carried a reply port (brokered on, not through the tap).
    public var hasReplyPort: Bool

    /// The bytes of all its bytes components.
    public var byteCount: Int {
        components.reduce(0) { total, component in if case .bytes(let count) = component { total + count } else { total } }
    }
}

/// A monitor event on the wire: a one-way message to the monitor's port, id
/// `MonitorEventCodec.messageID`, fields [name, connection, kind, direction, message id,
/// correlation, pid, uid, gid, time in nanoseconds, components], the components packed
/// into one bytes field (per component a kind byte — 0 bytes, 1 port, 2 descriptor — and
/// its size, 4 bytes little endian), then [has reply port]. A pid of 0 means no sender.
enum MonitorEventCodec {
    static let messageID: UInt32 = 111

    /// The event's message.
    static func encode(_ event: MonitoredMessage) -> Message {
        typealias F = NameField
        var packed: [UInt8] = []
        packed.reserveCapacity(event.components.count * 5)
        for component in event.components {
            let (kind, size): (UInt8, UInt32) = switch component {
            case .bytes(let count): (0, UInt32(clamping: count))
            case .port: (1, 0)
            case .descriptor: (2, 0)
            }
            packed.append(kind)
            withUnsafeBytes(of: size.littleEndian) { packed.append(contentsOf: $0) }
        }
        let sender = event.sender ?? SenderCredentials(pid: 0, uid: 0, gid: 0)
        let nanoseconds = UInt64(clamping: event.time.components.seconds) &* 1_000_000_000
            &+ UInt64(event.time.components.attoseconds / 1_000_000_000)
        return Message(id: messageID, components: [
            F.string(event.name), F.integer(event.connection), F.integer(UInt64(event.kind.rawValue)),
            F.integer(UInt64(event.direction.rawValue)), F.integer(event.id), F.integer(event.correlation),
            F.integer(sender.pid), F.integer(sender.uid), F.integer(sender.gid), F.integer(nanoseconds), .data(packed),
            F.integer(UInt64(event.hasReplyPort ? 1 : 0)),
        ])
    }

    /// The event a message to the monitor's port carries.
    static func decode(_ message: Message) throws(NameServerError) -> MonitoredMessage {
        guard message.id == messageID else { throw .protocolError("monitor event \(message.id) unknown") }
        var fields = NameFieldReader(message.components)
        let name = try fields.string()
        let connection = try fields.integer()
        guard let kind = MonitoredMessage.Kind(rawValue: UInt8(truncatingIfNeeded: try fields.integer())),
              let direction = MonitoredMessage.Direction(rawValue: UInt8(truncatingIfNeeded: try fields.integer())) else {
            throw .protocolError("a monitor event of an unknown kind or direction")
        }
        let id = UInt32(truncatingIfNeeded: try fields.integer())
        let correlation = try fields.integer()
        let pid = try fields.pid()
        let uid = try fields.uid()
        let gid = UInt32(truncatingIfNeeded: try fields.integer())
        let nanoseconds = try fields.integer()
        let packed = try fields.bytes()
        guard packed.count % 5 == 0 else { throw .protocolError("a monitor event's components are malformed") }
        var components: [MonitoredMessage.Component] = []
        for at in stride(from: 0, to: packed.count, by: 5) {
            let size = (1...4).reduce(0) { $0 | Int(packed[at + $1]) << (8 * ($1 - 1)) }
            switch packed[at] {
            case 0: components.append(.bytes(count: size))
            case 1: components.append(.port)
            case 2: components.append(.descriptor)
            default: throw .protocolError("a monitor event's component of kind \(packed[at])")
            }
        }
        let hasReplyPort = fields.atEnd ? false : try fields.integer() != 0
        return MonitoredMessage(
            name: name, connection: connection, kind: kind, direction: direction, id: id, correlation: correlation,
            sender: pid == 0 ? nil : SenderCredentials(pid: pid, uid: uid, gid: gid),
            time: .seconds(Int64(nanoseconds / 1_000_000_000)) + .nanoseconds(Int64(nanoseconds % 1_000_000_000)),
            components: components, hasReplyPort: hasReplyPort)
    }

    /// What a monitor reports of `message`'s components.
    static func components(of message: Message) -> [MonitoredMessage.Component] {
        message.components.map { component in
            switch component {
            case .data(let bytes): .bytes(count: bytes.count)
            case .port: .port
            case .descriptor: .descriptor
            }
        }
    }

    /// Now, on the system's real-time clock.
    static func now() -> Duration {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return .seconds(Int64(spec.tv_sec)) + .nanoseconds(Int64(spec.tv_nsec))
    }
}
