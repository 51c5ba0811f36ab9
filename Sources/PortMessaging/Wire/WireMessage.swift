/// What a frame means to the transport. The byte values are part of the wire format.
///
/// A decoder rejects a value it does not know (`WireError.unknownKind`) rather than
/// guessing, so a new kind needs no version bump but an old peer refuses it loudly.
package enum WireKind: UInt8, Hashable, Sendable, CaseIterable {
    /// A one-way message; no reply is expected.
    case message = 0
    /// A request; the peer answers with a `.reply` carrying the same sequence number.
    case request = 1
    /// The answer to the request with the same sequence number.
    case reply = 2
    /// The check-in handshake that introduces a port to a peer.
    case checkIn = 3
    /// Transport control: the frame's only descriptor is a new connection for the
    /// receiving port to adopt (how a port travels on to a third party).
    case adoptConnection = 4
    /// Transport control, header only: the largest message (bytes components together)
    /// the sending side's port accepts, in the id field. A port writes it first when it
    /// takes a connection, so its peer refuses larger messages before sending them.
    case limits = 5
    /// Header only: the request with this sequence number gets no reply (the receiving
    /// handler let its `PendingReply` go unanswered).
    case noReply = 6
    /// Transport control: the listening port refused the connection (its
    /// `PeerRequirement` did not admit the connecting process); one bytes component, the
    /// reason in UTF-8. The port closes the connection right after it.
    case refused = 7
}

/// Why the request of a `noReply` frame gets no reply: the frame's id field. A reader takes
/// a reason it does not know as `unanswered`.
package enum NoReplyReason {
    /// The receiving handler let the request go unanswered (or refused it).
    package static let unanswered: UInt32 = 0
    /// The receiver could not take the request's ports or descriptors: its descriptor
    /// table is full.
    package static let outOfDescriptors: UInt32 = 1
}

/// Per-frame flag bits. Version 1 defines none: every set bit is unknown and rejected
/// (`WireError.unknownFlags`), which keeps the bits free for later meanings.
package struct WireFlags: OptionSet, Hashable, Sendable {
    /// The raw 16-bit flags field.
    package var rawValue: UInt16
    /// Wraps a raw flags field.
    package init(rawValue: UInt16) { self.rawValue = rawValue }
    /// The bits this version understands; anything else is an error.
    package static let known: WireFlags = []
}

/// One item of a message's ordered content.
///
/// Ports and file descriptors never travel as bytes: they go beside the frame as
/// SCM_RIGHTS descriptors, and a component names one by its index in that array.
package enum WireComponent: Hashable, Sendable {
    /// Plain bytes, carried inside the frame.
    case bytes([UInt8])
    /// A port, carried as the descriptor at this index (a connected socket).
    case port(index: Int)
    /// A file descriptor, carried as the descriptor at this index.
    case descriptor(index: Int)
}

/// A decoded frame: the value the transport maps its public `Message` to and from.
///
/// Descriptor references (port and descriptor components and the reply port) must use
/// each index of the frame's descriptor array exactly once, so every received
/// descriptor ends up with exactly one owner: none leaks, none is closed twice.
package struct WireMessage: Hashable, Sendable {
    /// What the frame is for.
    package var kind: WireKind
    /// Flag bits; must be a subset of `WireFlags.known`.
    package var flags: WireFlags
    /// The application's message id.
    package var id: UInt32
    /// Matches a reply to its request; free for other kinds.
    package var sequence: UInt64
    /// Index of the reply port in the descriptor array, if the message has one.
    package var replyPort: Int?
    /// The ordered content.
    package var components: [WireComponent]

    /// Creates a message value.
    package init(
        kind: WireKind = .message,
        flags: WireFlags = [],
        id: UInt32,
        sequence: UInt64 = 0,
        replyPort: Int? = nil,
        components: [WireComponent] = []
    ) {
        self.kind = kind
        self.flags = flags
        self.id = id
        self.sequence = sequence
        self.replyPort = replyPort
        self.components = components
    }

    /// How many descriptors travel with this message: one per port or descriptor
    /// component, plus the reply port.
    package var descriptorCount: Int {
        var count = replyPort == nil ? 0 : 1
        for component in components {
            switch component {
            case .bytes: break
            case .port, .descriptor: count += 1
            }
        }
        return count
    }
}
