/// A message: an id, ordered components (bytes, ports, file descriptors) and an optional
/// reply port — the seeds' NSPortMessage, with no Foundation in it.
///
/// Descriptors: sending does not take a descriptor component away from the sender (the
/// kernel, or the in-process transport, gives the receiver a duplicate); a received
/// descriptor belongs to the receiver, who closes it.
public struct Message: Sendable {
    /// The application's message id (the check-in protocol uses 100 unless configured).
    public var id: UInt32
    /// The content, in order. A message of one component stores it without an array, so
    /// reading this makes one for it; `bytes`, `ports` and `descriptors` read the
    /// components without.
    public var components: [MessageComponent] {
        get { parts.array }
        set { parts = MessageParts(newValue) }
    }
    /// The content as stored: without an array for a message of one component.
    var parts: MessageParts
    /// Where the receiver can send answers, if anywhere.
    public var replyPort: SendPort?
    /// Who sent it: set on every message a port receives, a reply included, whatever the
    /// transport (the kernel's word over a socket; the spawned child or its parent over
    /// pipes; this process in-process). `nil` on a message made here and not yet sent.
    public var sender: SenderCredentials?
    /// The connection it came over, when it came from another process into a port
    /// (`nil` in-process, and on a reply): a server keys what a client holds by it.
    public var peer: PortPeer?

    /// Makes a message.
    public init(id: UInt32 = 0, components: [MessageComponent] = [], replyPort: SendPort? = nil) {
        // Each field stored here, not through another initializer: delegating copies the
        // whole message once more.
        self.id = id
        self.parts = MessageParts(components)
        self.replyPort = replyPort
    }

    /// A received message, made whole in one step (each field stored once, nothing
    /// copied after).
    init(id: UInt32, parts: MessageParts, replyPort: SendPort?, sender: SenderCredentials?, peer: PortPeer?) {
        self.id = id
        self.parts = parts
        self.replyPort = replyPort
        self.sender = sender
        self.peer = peer
    }

    /// Makes a message with one bytes component.
    public init(id: UInt32 = 0, bytes: [UInt8], replyPort: SendPort? = nil) {
        self.id = id
        self.parts = MessageParts(.data(bytes))
        self.replyPort = replyPort
    }

    /// Makes a message with one bytes component holding `text` as UTF-8.
    public init(id: UInt32 = 0, text: String, replyPort: SendPort? = nil) {
        self.init(id: id, bytes: Array(text.utf8), replyPort: replyPort)
    }

    /// How many components it has, read without making `components`.
    package var componentCount: Int { parts.count }

    /// Its first component, if any, read without making `components`.
    package var firstComponent: MessageComponent? { parts.first }

    /// The first bytes component, or empty.
    public var bytes: [UInt8] {
        for component in parts { if case .data(let bytes) = component { return bytes } }
        return []
    }

    /// The first bytes component as UTF-8 text.
    public var text: String { String(decoding: bytes, as: UTF8.self) }

    /// The ports among the components, in order.
    public var ports: [SendPort] {
        parts.compactMap { if case .port(let port) = $0 { port } else { nil } }
    }

    /// The file descriptors among the components, in order.
    public var descriptors: [CInt] {
        parts.compactMap { if case .descriptor(let fd) = $0 { fd } else { nil } }
    }
}

/// One item of a message.
public enum MessageComponent: Sendable {
    /// Bytes.
    case data([UInt8])
    /// A port the receiver can send to (a send right).
    case port(SendPort)
    /// A file descriptor (the receiver gets its own duplicate).
    case descriptor(CInt)
}
