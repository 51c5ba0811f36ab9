import PortMessaging

/// One client call's request, made the same way for the blocking and the async form:
/// its operation, fields, how long the server may hold it, and what it is for the errors.
struct NameCall {
    var operation: NameOperation
    var fields: [MessageComponent]
    /// How long the server may hold the request (a lookup waiting for its name).
    var wait: Duration = .zero
    var what: String

    /// The request message: id = operation, one component per field.
    var message: Message { Message(id: operation.rawValue, components: fields) }

    /// `register`: the port travels as any port does (the server receives a connection into
    /// it); a scope other than `.host` goes as a trailing field.
    static func register(_ name: String, _ port: ReceivePort, scope: NameScope, again: Bool = false) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        var fields = [NameField.string(name), .port(port.makeSendPort())]
        if scope != .host { fields.append(NameField.integer(scope.rawValue)) }
        return NameCall(operation: .register, fields: fields, what: again ? "registering '\(name)' again" : "registering '\(name)'")
    }

    /// `unregister`.
    static func unregister(_ name: String) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        return NameCall(operation: .unregister, fields: [NameField.string(name)], what: "releasing '\(name)'")
    }

    /// `lookup` or `owner(of:)`, waiting up to `wait` for the name.
    static func lookup(_ operation: NameOperation, _ name: String, _ wait: Duration?) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        let wait = max(wait ?? .zero, .zero)
        let milliseconds = UInt64(min((wait / .milliseconds(1)).rounded(.up), Double(maxLookupWaitMilliseconds)))
        return NameCall(
            operation: operation, fields: [NameField.string(name), NameField.integer(milliseconds)], wait: wait,
            what: "looking up '\(name)'")
    }

    /// `list`, with the names other nodes hold when the server is a cluster's node.
    static let list = NameCall(operation: .list, fields: [NameField.withOtherNodes], what: "listing names")
}
