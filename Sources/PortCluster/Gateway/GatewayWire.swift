import PortMessaging

/// The one message a connection into a `ClusterGateway` begins with, and its answer.
///
/// The open request: id `openID`, one data component, the name's UTF-8 bytes. Its reply:
/// id `openID`, a first data component of one byte (`Status`), and a second with a
/// sentence saying why when it is not `opened`. Every later message on the connection is
/// the caller's own, relayed to the name's owner unchanged (its id and data components).
enum GatewayWire {
    /// "PKGO": the open request's id, and its reply's.
    static let openID: UInt32 = 0x504B_474F

    /// How an open request went.
    enum Status: UInt8 {
        /// The connection relays to the name's owner from now on.
        case opened = 0
        /// No owner of the name on this node (it moved, or its owner died meanwhile).
        case notHere = 1
        /// The first message was not an open request.
        case protocolError = 2
    }

    /// The open request for `name`.
    static func open(_ name: String) -> Message {
        Message(id: openID, components: [.data(Array(name.utf8))])
    }

    /// The name an open request asks for; `nil` when it is not one.
    static func name(in message: Message) -> String? {
        guard message.components.count == 1, case .data(let bytes) = message.components[0], !bytes.isEmpty,
            let name = String(validating: bytes, as: UTF8.self)
        else { return nil }
        return name
    }

    /// The reply to an open request.
    static func answer(_ status: Status, detail: String = "") -> Message {
        Message(id: openID, components: [.data([status.rawValue]), .data(Array(detail.utf8))])
    }

    /// What a reply to an open request says: its status and detail; `nil` when it is not one.
    static func status(of reply: Message) -> (Status, String)? {
        guard reply.id == openID, reply.components.count == 2, case .data(let code) = reply.components[0],
            code.count == 1, let status = Status(rawValue: code[0]), case .data(let detail) = reply.components[1]
        else { return nil }
        return (status, String(decoding: detail, as: UTF8.self))
    }
}
