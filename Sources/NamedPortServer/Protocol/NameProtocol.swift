import Glibc
import PortMessaging
import PortKitSystem

// The name protocol (docs/NAMES.md), version 4: PortMessaging requests to the server's
// listening port. A request's message id is the operation; the reply's id is a status.
// Every field is one component: a string as its UTF-8 bytes, an integer as 8 bytes little
// endian, a list of owners packed into one bytes component, a port as a port component
// (PortMessaging brokers it). Watch events are one-way messages to the port the watcher
// passed with its watch.

/// The protocol version the hello exchange carries.
let nameProtocolVersion: UInt64 = 4

/// What a request asks for: the id of a request message.
package enum NameOperation: UInt32, Sendable {
    /// [version] → ok [server pid, server uid, version]
    case hello = 1
    /// [name, port] → ok []; optionally [scope, terms (what to do if the name is taken,
    /// whether others may replace it), peer requirement, notice port] after them →
    /// ok [1] when queued behind the owner (`NameProtocol+Standby.swift`).
    case register = 2
    /// [name] → ok []
    case unregister = 3
    /// [name, wait ms] → ok [pid, uid, port]: a connection to the owner's port.
    case lookup = 4
    /// [name, wait ms] → ok [pid, uid]; no connection is made.
    case owner = 5
    /// [] → ok [owners]; [1] → ok [owners, other nodes' owners] (the second field only
    /// from a cluster's node).
    case list = 6
    /// [watch id, prefix or name, exact (0: prefix, 1: the name only), port] → ok [owners]
    /// (the current owners); events follow, to the port. A trailing [1] asks for other
    /// nodes' names too: ok [owners, other nodes' owners], and their events.
    case watch = 7
    /// [watch id] → ok []
    case unwatch = 8
    /// [] → ok [pid, uptime ms, connections, names, watches, waiting lookups, refused
    /// connections, refused requests] (NameServerStatus.swift)
    case status = 9
    /// [name, held name] → ok []: `name` for the port this connection registered as `held
    /// name` (notFound or notOwner of `held name` otherwise), which is not sent again; a
    /// trailing scope field as `register`'s. A server that predates it answers a protocol
    /// error (unknown operation), and the client sends `register`.
    case registerSame = 10
    /// [monitor id, port, pattern…] → ok [owners the patterns match]: a pattern is a name,
    /// or a prefix and `*`. Events (`MonitorEventCodec`) follow, to the port, for each
    /// connection brokered to a matching name while the monitor lasts (NameService+Monitor.swift).
    case monitor = 11
    /// [name] → ok [pid, uid, gid, executable, cgroup], then fields other features add at
    /// the end (`NameOwnerStatus`).
    case nameStatus = 12
    /// [] → ok [activatable names, one string, separated by newlines]: the names the
    /// server's service files declare (NameService+Activation.swift).
    case activatable = 13
}

/// What a watch's port receives: the id of a one-way message, fields [name, pid, uid], and
/// [node] after them for a name on another node.
enum NameNotice: UInt32, Sendable {
    case appeared = 101
    case vanished = 102
}

/// What a registration's notice port receives (one-way): its standby took the name over
/// [name], or another connection replaced it [name, new owner pid].
enum RegistrationNotice: UInt32, Sendable {
    case granted = 103
    case replaced = 104
}

/// How a request went: the id of a reply.
package enum NameStatus: UInt32, Sendable {
    case ok = 0
    /// [name, owner pid]
    case nameTaken = 1
    /// [name]
    case notFound = 2
    /// [what waited]
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
    /// [reason]: out of resources.
    case busy = 10
    /// [name, node, owner pid]: another node of the cluster holds the name.
    case takenElsewhere = 11
    /// [name, reason]: the owner's peer requirement refuses the looker.
    case requirementNotMet = 12
    /// [name, how (0 exited, 1 signalled, 2 timed out, 3 could not start), status, signal
    /// or milliseconds, detail]: an activatable name's service did not register it.
    case activationFailed = 13
}

/// The largest request a server takes: a register of a 255-byte name is about 300 bytes.
/// Its port refuses a larger one at its header, and says so to every client as it
/// connects, so that a client refuses it itself (`messageTooLarge`).
let maxRequestBytes = 4096

/// The longest a lookup may wait for a name, whatever the client asks (one day).
let maxLookupWaitMilliseconds: UInt64 = 86_400_000

/// Building fields.
enum NameField {
    static func string(_ value: String) -> MessageComponent { .data(Array(value.utf8)) }

    static func integer(_ value: UInt64) -> MessageComponent {
        .data(withUnsafeBytes(of: value.littleEndian) { Array($0) })
    }

    static func integer(_ value: Int32) -> MessageComponent { integer(UInt64(UInt32(bitPattern: value))) }
    static func integer(_ value: UInt32) -> MessageComponent { integer(UInt64(value)) }
    static func integer(_ value: Int) -> MessageComponent { integer(UInt64(clamping: value)) }

    /// Owners packed into one field: per owner its name's length (one byte: names are at
    /// most 255 bytes), the name, the pid and the uid (4 bytes little endian each); with
    /// `withNodes` (owners on other nodes), then its node's name's length (one byte) and name.
    static func owners(_ owners: [NameOwner], withNodes: Bool = false) -> MessageComponent {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(owners.reduce(0) { $0 + 9 + $1.name.utf8.count })
        for owner in owners {
            let name = owner.name.utf8.prefix(NameRules.maxNameBytes)
            bytes.append(UInt8(name.count))
            bytes.append(contentsOf: name)
            withUnsafeBytes(of: UInt32(bitPattern: owner.pid).littleEndian) { bytes.append(contentsOf: $0) }
            withUnsafeBytes(of: owner.uid.littleEndian) { bytes.append(contentsOf: $0) }
            if withNodes {
                let node = (owner.node ?? "").utf8.prefix(Int(UInt8.max))
                bytes.append(UInt8(node.count))
                bytes.append(contentsOf: node)
            }
        }
        return .data(bytes)
    }

    /// The flag a `list` or `watch` request ends with to ask for other nodes' names too.
    static let withOtherNodes = integer(UInt64(1))
}

/// Reading fields in order; every read fails with a protocol error rather than trapping.
struct NameFieldReader {
    private let components: [MessageComponent]
    private var index = 0

    init(_ components: [MessageComponent]) { self.components = components }

    /// Whether every field has been read.
    var atEnd: Bool { index == components.count }

    mutating func bytes() throws(NameServerError) -> [UInt8] {
        guard index < components.count, case .data(let bytes) = components[index] else {
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
        return Self.littleEndian(raw[...])
    }

    mutating func pid() throws(NameServerError) -> Int32 { Int32(bitPattern: UInt32(truncatingIfNeeded: try integer())) }
    mutating func uid() throws(NameServerError) -> UInt32 { UInt32(truncatingIfNeeded: try integer()) }

    /// A port component.
    mutating func port() throws(NameServerError) -> SendPort {
        guard index < components.count, case .port(let port) = components[index] else {
            throw .protocolError("field \(index): port expected")
        }
        index += 1
        return port
    }

    /// A packed list of owners (`NameField.owners`); with `withNodes`, of owners on other
    /// nodes, each with its node.
    mutating func owners(withNodes: Bool = false) throws(NameServerError) -> [NameOwner] {
        let raw = try bytes()
        var owners: [NameOwner] = []
        var at = raw.startIndex
        while at < raw.endIndex {
            let length = Int(raw[at])
            var end = at + 1 + length + 8
            guard end <= raw.endIndex, let name = String(validating: raw[(at + 1)..<(at + 1 + length)], as: UTF8.self) else {
                throw .protocolError("field \(index - 1): a malformed list of owners")
            }
            let pid = Int32(bitPattern: UInt32(truncatingIfNeeded: Self.littleEndian(raw[(end - 8)..<(end - 4)])))
            let uid = UInt32(truncatingIfNeeded: Self.littleEndian(raw[(end - 4)..<end]))
            var node: String?
            if withNodes {
                let nodeLength = end < raw.endIndex ? Int(raw[end]) : 0
                guard end < raw.endIndex, end + 1 + nodeLength <= raw.endIndex,
                      let text = String(validating: raw[(end + 1)..<(end + 1 + nodeLength)], as: UTF8.self) else {
                    throw .protocolError("field \(index - 1): a malformed list of owners on other nodes")
                }
                node = text
                end += 1 + nodeLength
            }
            owners.append(NameOwner(name: name, pid: pid, uid: uid, node: node))
            at = end
        }
        return owners
    }

    /// Whether a `list` or `watch` request ends with the flag that asks for other nodes'
    /// names (absent from clients that do not know them).
    mutating func asksForOtherNodes() throws(NameServerError) -> Bool {
        atEnd ? false : try integer() == 1
    }

    /// The owners of a `list` or `watch` reply: this host's, then (when the reply has the
    /// field) other nodes', sorted by name.
    mutating func ownersHereAndElsewhere() throws(NameServerError) -> [NameOwner] {
        let here = try owners()
        guard !atEnd else { return here }
        return (here + (try owners(withNodes: true))).sorted { $0.name < $1.name }
    }

    private static func littleEndian(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var value: UInt64 = 0
        for (shift, byte) in bytes.enumerated() { value |= UInt64(byte) << (8 * UInt64(shift)) }
        return value
    }
}

/// Errors to and from reply statuses, in one place for both sides.
enum NameReply {
    /// The reply that carries `error` to a client.
    static func encode(_ error: NameServerError) -> Message {
        typealias F = NameField
        let (status, fields): (NameStatus, [MessageComponent]) = switch error {
        case .nameTaken(let name, let pid): (.nameTaken, [F.string(name), F.integer(pid)])
        case .nameTakenElsewhere(let name, let node, let pid): (.takenElsewhere, [F.string(name), F.string(node), F.integer(pid)])
        case .notFound(let name): (.notFound, [F.string(name)])
        case .waitTimedOut(let operation): (.timedOut, [F.string(operation)])
        case .permissionDenied(let reason): (.permissionDenied, [F.string(reason)])
        case .invalidName(let name, let reason): (.invalidName, invalidNameFields(name, reason))
        case .notOwner(let name, let pid): (.notOwner, [F.string(name), F.integer(pid)])
        case .limitExceeded(let what, let limit): (.limitExceeded, [F.string(what), F.integer(limit)])
        case .protocolError(let detail): (.badRequest, [F.string(detail)])
        case .serverBusy(_, let reason): (.busy, [F.string(reason)])
        case .peerRequirementNotMet(let name, let reason): (.requirementNotMet, [F.string(name), F.string(reason)])
        case .activationFailed(let name, let reason): (.activationFailed, [F.string(name)] + reason.fields)
        case .serverUnavailable, .serverAlreadyRunning, .connectionLost, .system, .untrustedServer, .transport, .requirementCannotTravel:
            (.badRequest, [F.string(error.description)])
        }
        return Message(id: status.rawValue, components: fields)
    }

    private static func invalidNameFields(_ name: String, _ reason: NameServerError.InvalidNameReason) -> [MessageComponent] {
        let (code, bytes): (UInt64, Int) = switch reason {
        case .empty: (0, 0)
        case .tooLong(let bytes): (1, bytes)
        case .controlCharacter: (2, 0)
        case .slash: (3, 0)
        case .notUTF8: (4, 0)
        case .whitespace: (5, 0)
        }
        return [.data(Array(name.utf8.prefix(NameRules.maxNameBytes + 1))), NameField.integer(code), NameField.integer(bytes)]
    }

    /// The error a non-ok reply from the server at `address` stands for.
    static func decode(status rawStatus: UInt32, _ components: [MessageComponent], address: String) -> NameServerError {
        guard let status = NameStatus(rawValue: rawStatus) else { return .protocolError("unknown status \(rawStatus)") }
        var fields = NameFieldReader(components)
        do throws(NameServerError) {
            switch status {
            case .ok: return .protocolError("an ok reply is not an error")
            case .nameTaken: return .nameTaken(name: try fields.string(), ownerPID: try fields.pid())
            case .notFound: return .notFound(name: try fields.string())
            case .timedOut: return .waitTimedOut(operation: try fields.string())
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
            case .takenElsewhere:
                return .nameTakenElsewhere(name: try fields.string(), node: try fields.string(), ownerPID: try fields.pid())
            case .requirementNotMet: return .peerRequirementNotMet(name: try fields.string(), reason: try fields.string())
            case .activationFailed:
                return .activationFailed(name: try fields.string(), reason: try NameActivationFailure(&fields))
            }
        } catch {
            return error
        }
    }
}

extension Message {
    /// Closes what a message carries that its receiver will not keep: its descriptors, and
    /// the connections of its ports.
    func discardAttachments() {
        for component in components {
            switch component {
            case .data: break
            case .port(let port): port.invalidate()
            case .descriptor(let fd): try? FileDescriptor(rawValue: fd).close()
            }
        }
        replyPort?.invalidate()
    }
}
