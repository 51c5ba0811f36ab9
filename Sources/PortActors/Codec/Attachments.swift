import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem

/// The ports and file descriptors of one message, kept beside its bytes: encoding appends
/// each one met and writes its index; decoding finds it by that index.
///
/// A port or a descriptor is a message component of its own, so it travels as it does in
/// any PortKit message (a fresh connection, or `SCM_RIGHTS`), never as bytes.
final class AttachmentTable {
    /// The components to send after the envelope, in the order met.
    private(set) var outgoing: [MessageComponent] = []
    /// The components received after the envelope.
    let incoming: [MessageComponent]
    /// Which incoming descriptors a decoded value took (the others are closed afterwards).
    private var claimed: Set<Int> = []

    init(incoming: [MessageComponent] = []) {
        self.incoming = incoming
    }

    /// A message's components: `first` (its envelope or reply), then the ports and
    /// descriptors set aside (one array, made once).
    static func components(_ first: [UInt8], then attachments: [MessageComponent]) -> [MessageComponent] {
        var components: [MessageComponent] = []
        components.reserveCapacity(1 + attachments.count)
        components.append(.data(first))
        components.append(contentsOf: attachments)
        return components
    }

    /// A message of `first` (an envelope or a reply) and the ports and descriptors set
    /// aside: one of a single component, without an array, when there are none.
    static func message(id: UInt32, _ first: [UInt8], then attachments: [MessageComponent]) -> Message {
        attachments.isEmpty ? Message(id: id, bytes: first) : Message(id: id, components: components(first, then: attachments))
    }

    /// The table of `message`'s components after its first, `nil` if there are none: most
    /// messages carry no port or descriptor, and need no table.
    static func incoming(after message: Message) -> AttachmentTable? {
        message.componentCount > 1 ? AttachmentTable(incoming: Array(message.components.dropFirst())) : nil
    }

    /// Sets `component` aside; its index.
    func append(_ component: MessageComponent) -> Int {
        outgoing.append(component)
        return outgoing.count - 1
    }

    /// The received port at `index`.
    func port(at index: Int) throws(PortActorError) -> SendPort {
        guard incoming.indices.contains(index), case .port(let port) = incoming[index] else {
            throw .decoding("no port at attachment \(index)")
        }
        return port
    }

    /// The received descriptor at `index`, which the caller now owns.
    func descriptor(at index: Int) throws(PortActorError) -> CInt {
        guard incoming.indices.contains(index), case .descriptor(let fd) = incoming[index] else {
            throw .decoding("no descriptor at attachment \(index)")
        }
        guard claimed.insert(index).inserted else { throw .decoding("descriptor attachment \(index) decoded twice") }
        return fd
    }

    /// The `userInfo` of an encoder or a decoder that uses this table (and, when given,
    /// `system`, for actor references): made once per coder, not per value.
    func userInfo(system: PortActorSystem?) -> [CodingUserInfoKey: Any] {
        var userInfo: [CodingUserInfoKey: Any] = [.portActorAttachments: self]
        if let system { userInfo[.actorSystemKey] = system }
        return userInfo
    }

    /// Closes the received descriptors no value took: nobody else will.
    func closeUnclaimed() {
        for (index, component) in incoming.enumerated() where !claimed.contains(index) {
            if case .descriptor(let fd) = component { try? FileDescriptor(rawValue: fd).close() }
        }
    }
}

extension Encoder {
    /// The attachment table of the PortActors message being encoded.
    fileprivate func attachmentTable(for what: String) throws -> AttachmentTable {
        guard let table = userInfo[.portActorAttachments] as? AttachmentTable else {
            throw EncodingError.invalidValue(what, .init(codingPath: codingPath, debugDescription: "\(what) travels only in a PortActors call"))
        }
        return table
    }
}

extension Decoder {
    /// The attachment table of the PortActors message being decoded.
    fileprivate func attachmentTable(for what: String) throws -> AttachmentTable {
        guard let table = userInfo[.portActorAttachments] as? AttachmentTable else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "\(what) travels only in a PortActors call"))
        }
        return table
    }
}

/// A `SendPort` as an argument or result of a distributed call: it travels as a port
/// component of the call's message, as in any PortKit message, and arrives as a send port
/// connected to the same receive port.
///
/// Only within a host: a call to an actor on another node that carries one is refused
/// with `PortActorError.transport(.cannotCrossHosts)`, nothing sent.
public struct TransferablePort: Codable, Sendable {
    /// The port.
    public let port: SendPort

    /// Wraps `port` to pass it in a call.
    public init(_ port: SendPort) {
        self.port = port
    }

    /// Sets the port aside as a component of the message and writes its index.
    public func encode(to encoder: any Encoder) throws {
        let table = try encoder.attachmentTable(for: "a port")
        var container = encoder.singleValueContainer()
        try container.encode(UInt32(table.append(.port(port))))
    }

    /// Finds the port among the received message's components.
    public init(from decoder: any Decoder) throws {
        let table = try decoder.attachmentTable(for: "a port")
        let index = try decoder.singleValueContainer().decode(UInt32.self)
        port = try table.port(at: Int(index))
    }
}

/// A file descriptor as an argument or result of a distributed call: it travels as a
/// descriptor component of the call's message (`SCM_RIGHTS`), so the receiver gets a
/// descriptor of its own for the same open file.
///
/// The sender keeps its descriptor (and closes it when it likes); the receiver owns the
/// one it decodes and closes it. Only within a host: a call to an actor on another node
/// that carries one is refused with `PortActorError.transport(.cannotCrossHosts)`, nothing sent.
public struct TransferableDescriptor: Codable, Sendable {
    /// The descriptor: the sender's before the call, the receiver's own after it.
    public let rawValue: CInt

    /// Wraps the open descriptor `rawValue` to pass it in a call.
    public init(_ rawValue: CInt) {
        self.rawValue = rawValue
    }

    /// Sets the descriptor aside as a component of the message and writes its index.
    public func encode(to encoder: any Encoder) throws {
        let table = try encoder.attachmentTable(for: "a file descriptor")
        var container = encoder.singleValueContainer()
        try container.encode(UInt32(table.append(.descriptor(rawValue))))
    }

    /// Takes the descriptor from the received message's components.
    public init(from decoder: any Decoder) throws {
        let table = try decoder.attachmentTable(for: "a file descriptor")
        let index = try decoder.singleValueContainer().decode(UInt32.self)
        rawValue = try table.descriptor(at: Int(index))
    }
}
