import PortMessaging

// The name protocol (docs/NAMES.md): PortKit wire frames (docs/WIRE.md) over a
// SOCK_STREAM Unix socket. A request's id is the operation, its sequence is chosen by the
// client; the reply carries the same sequence and a status as its id. The server's own
// messages (a connection for a registered name, watch events) are one-way frames. Every
// field is one bytes component: a string as UTF-8, an integer as 8 bytes little-endian.
// A brokered connection travels as a port component (SCM_RIGHTS).

/// The protocol version the hello exchange carries. Version 2 adds the offer channel of a
/// registration, version 3 replies in parts (`more`) and the `busy` status (docs/NAMES.md);
/// a server serves every older version too.
let nameProtocolVersion: UInt64 = 3

/// The first version whose clients take a reply in parts and the `busy` status.
let partedRepliesVersion: UInt64 = 3

/// The oldest version a server still serves.
let oldestNameProtocolVersion: UInt64 = 1

/// What a request asks for: the id of a `.request` frame.
package enum NameOperation: UInt32, Sendable {
    /// [version] → ok [server pid, server uid, version]
    case hello = 1
    /// [name, offer channel (port, optional, version 2)] → ok []
    case register = 2
    /// [name] → ok []
    case unregister = 3
    /// [name, wait ms] → ok [pid, uid, port]; the owner gets the other end as an offer.
    case lookup = 4
    /// [name, wait ms] → ok [pid, uid]; no connection is made.
    case owner = 5
    /// [] → ok [name, pid, uid]…
    case list = 6
    /// [watch id, prefix or name, exact (0: prefix, 1: the name only)] → ok [name, pid, uid]…
    /// (the current owners); events follow.
    case watch = 7
    /// [watch id] → ok []
    case unwatch = 8
    /// [] → ok [pid, uptime ms, connections, names, watches, waiting lookups, refused
    /// connections, refused requests] (NameServerStatus.swift)
    case status = 9
}

/// What the server tells a client unasked: the id of a `.message` frame.
enum NameNotice: UInt32, Sendable {
    /// [name, port]: a new connection to the port registered as name; adopt it.
    case connectionOffer = 100
    /// [watch id, name, pid, uid]
    case appeared = 101
    /// [watch id, name, pid, uid]
    case vanished = 102
    /// [status, the fields of that status's reply]: why the server closes the connection,
    /// sent just before it does (a user the policy refuses, a server out of resources).
    case closing = 103
}

/// How a request went: the id of a `.reply` frame.
package enum NameStatus: UInt32, Sendable {
    case ok = 0
    /// [name, owner pid]
    case nameTaken = 1
    /// [name]
    case notFound = 2
    /// [name]
    case timedOut = 3
    /// [reason]
    case permissionDenied = 4
    /// [name, reason code, byte count]
    case invalidName = 5
    /// [name, owner pid]
    case notOwner = 6
    /// [what, limit]
    case limitExceeded = 7
    /// [detail]
    case badRequest = 8
    /// [part of the ok fields] (version 3): the reply goes on in the next frame of the
    /// same sequence; the client joins the parts' fields in order.
    case more = 9
    /// [reason] (version 3): out of resources; older clients get `badRequest`.
    case busy = 10
}

/// What a server reads from a client: every request is a few hundred bytes at most (a
/// register: a 255-byte name and an offer channel), so a frame is refused at its header
/// past 4 KiB, and its body is never buffered.
let requestLimits = WireLimits(maxFrameBytes: 4096, maxComponents: 16, maxDescriptors: 1)

/// The most fields and bytes one reply frame carries; a longer reply (a `list` or a watch
/// snapshot of many names) goes in parts (`more`) to a version 3 client.
let maxReplyPartComponents = WireLimits.default.maxComponents
let maxReplyPartBytes = 64 * 1024

/// The fields of an ok reply cut into frames' worth, in order (one part at least).
func replyParts(_ components: [WireComponent]) -> [[WireComponent]] {
    var parts: [[WireComponent]] = []
    var current: [WireComponent] = []
    var bytes = 0
    for component in components {
        // A component's encoded size: its 5-byte header and, for bytes, the payload.
        let size = 5 + (component.byteCount ?? 0)
        if !current.isEmpty && (current.count == maxReplyPartComponents || bytes + size > maxReplyPartBytes) {
            parts.append(current)
            current = []
            bytes = 0
        }
        current.append(component)
        bytes += size
    }
    parts.append(current)
    return parts
}

extension WireComponent {
    /// The payload length of a bytes component; `nil` for a port or a descriptor.
    var byteCount: Int? {
        if case .bytes(let bytes) = self { return bytes.count }
        return nil
    }
}

/// The longest a lookup may wait for a name, whatever the client asks (one day).
let maxLookupWaitMilliseconds: UInt64 = 86_400_000

/// One frame ready to be written, with the descriptors that go beside it (SCM_RIGHTS),
/// which the writer owns until they are sent and then closes.
struct OutgoingFrame {
    var bytes: [UInt8]
    var descriptors: [CInt]
}

/// One received frame, decoded, with the descriptors that came with it (the receiver
/// owns them).
struct IncomingFrame {
    var message: WireMessage
    var descriptors: [CInt]
}

/// Building fields.
enum NameField {
    static func string(_ value: String) -> WireComponent { .bytes(Array(value.utf8)) }

    static func integer(_ value: UInt64) -> WireComponent {
        .bytes(withUnsafeBytes(of: value.littleEndian) { Array($0) })
    }

    static func integer(_ value: Int32) -> WireComponent { integer(UInt64(UInt32(bitPattern: value))) }
    static func integer(_ value: UInt32) -> WireComponent { integer(UInt64(value)) }
    static func integer(_ value: Int) -> WireComponent { integer(UInt64(clamping: value)) }

    /// The three fields of an owner record.
    static func owner(_ owner: NameOwner) -> [WireComponent] {
        [string(owner.name), integer(owner.pid), integer(owner.uid)]
    }
}

/// Reading fields in order; every read fails with a protocol error rather than trapping.
struct NameFieldReader {
    private let components: [WireComponent]
    private var index = 0

    init(_ components: [WireComponent]) { self.components = components }

    /// Whether every field has been read.
    var atEnd: Bool { index == components.count }

    mutating func bytes() throws(NameServerError) -> [UInt8] {
        guard index < components.count, case .bytes(let bytes) = components[index] else {
            throw .protocolError("field \(index): bytes expected")
        }
        index += 1
        return bytes
    }

    mutating func string() throws(NameServerError) -> String {
        let raw = try bytes()
        guard let value = String(validating: raw, as: UTF8.self) else { throw .protocolError("field \(index - 1): not UTF-8") }
        return value
    }

    mutating func integer() throws(NameServerError) -> UInt64 {
        let raw = try bytes()
        guard raw.count == 8 else { throw .protocolError("field \(index - 1): 8-byte integer expected, got \(raw.count)") }
        var value: UInt64 = 0
        for (shift, byte) in raw.enumerated() { value |= UInt64(byte) << (8 * UInt64(shift)) }
        return value
    }

    mutating func pid() throws(NameServerError) -> Int32 { Int32(bitPattern: UInt32(truncatingIfNeeded: try integer())) }
    mutating func uid() throws(NameServerError) -> UInt32 { UInt32(truncatingIfNeeded: try integer()) }

    /// The descriptor index of a port component.
    mutating func port() throws(NameServerError) -> Int {
        guard index < components.count, case .port(let descriptorIndex) = components[index] else {
            throw .protocolError("field \(index): port expected")
        }
        index += 1
        return descriptorIndex
    }

    mutating func owner() throws(NameServerError) -> NameOwner {
        NameOwner(name: try string(), pid: try pid(), uid: try uid())
    }

    /// Every remaining field, read as owner records.
    mutating func owners() throws(NameServerError) -> [NameOwner] {
        var owners: [NameOwner] = []
        while !atEnd { owners.append(try owner()) }
        return owners
    }
}

/// Errors to and from reply statuses, in one place for both sides.
enum NameReply {
    /// The status and fields that carry `error` to a client of protocol `version`.
    static func encode(_ error: NameServerError, version: UInt64 = nameProtocolVersion) -> (NameStatus, [WireComponent]) {
        typealias F = NameField
        switch error {
        case .nameTaken(let name, let pid): return (.nameTaken, [F.string(name), F.integer(pid)])
        case .notFound(let name): return (.notFound, [F.string(name)])
        case .timedOut(let operation): return (.timedOut, [F.string(operation)])
        case .permissionDenied(let reason): return (.permissionDenied, [F.string(reason)])
        case .invalidName(let name, let reason):
            let (code, bytes): (UInt64, Int) = switch reason {
            case .empty: (0, 0)
            case .tooLong(let bytes): (1, bytes)
            case .controlCharacter: (2, 0)
            case .slash: (3, 0)
            case .notUTF8: (4, 0)
            case .whitespace: (5, 0)
            }
            return (.invalidName, [.bytes(Array(name.utf8.prefix(NameRules.maxNameBytes + 1))), F.integer(code), F.integer(bytes)])
        case .notOwner(let name, let pid): return (.notOwner, [F.string(name), F.integer(pid)])
        case .limitExceeded(let what, let limit): return (.limitExceeded, [F.string(what), F.integer(limit)])
        case .protocolError(let detail): return (.badRequest, [F.string(detail)])
        case .serverBusy(_, let reason) where version >= partedRepliesVersion: return (.busy, [F.string(reason)])
        case .serverUnavailable, .addressInUse, .connectionLost, .system, .untrustedServer, .serverBusy:
            return (.badRequest, [F.string(error.description)])
        }
    }

    /// The error a non-ok reply from the server at `address` stands for.
    static func decode(status rawStatus: UInt32, _ components: [WireComponent], address: String) -> NameServerError {
        guard let status = NameStatus(rawValue: rawStatus) else { return .protocolError("unknown status \(rawStatus)") }
        var fields = NameFieldReader(components)
        do throws(NameServerError) {
            switch status {
            case .ok, .more: return .protocolError("an ok reply is not an error")
            case .nameTaken: return .nameTaken(name: try fields.string(), ownerPID: try fields.pid())
            case .notFound: return .notFound(name: try fields.string())
            case .timedOut: return .timedOut(operation: try fields.string())
            case .permissionDenied: return .permissionDenied(reason: try fields.string())
            case .invalidName:
                let name = String(decoding: try fields.bytes(), as: UTF8.self)
                let code = try fields.integer()
                let bytes = Int(clamping: try fields.integer())
                let reason: NameServerError.InvalidNameReason = switch code {
                case 0: .empty
                case 1: .tooLong(bytes: bytes)
                case 2: .controlCharacter
                case 3: .slash
                case 5: .whitespace
                default: .notUTF8
                }
                return .invalidName(name: name, reason: reason)
            case .notOwner: return .notOwner(name: try fields.string(), ownerPID: try fields.pid())
            case .limitExceeded: return .limitExceeded(what: try fields.string(), limit: Int(clamping: try fields.integer()))
            case .badRequest: return .protocolError("the server refused the request: \(try fields.string())")
            case .busy: return .serverBusy(address: address, reason: try fields.string())
            }
        } catch {
            return error
        }
    }
}

extension WireMessage {
    /// Encodes a frame whose port and descriptor components refer to `descriptors` in order.
    func frame(with descriptors: [CInt] = []) throws(NameServerError) -> OutgoingFrame {
        do {
            return OutgoingFrame(bytes: try WireCodec.encode(self), descriptors: descriptors)
        } catch {
            throw .protocolError("cannot encode a frame: \(error)")
        }
    }
}
