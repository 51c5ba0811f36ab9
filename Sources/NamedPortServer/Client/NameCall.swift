import PortMessaging

/// One client call's request, made the same way for the blocking and the async form:
/// its operation, fields, how long the server may hold it, and what it is for the errors.
struct NameCall {
    var operation: NameOperation
    var fields: [MessageComponent]
    /// How long the server may hold the request (a lookup waiting for its name).
    var wait: Duration = .zero
    /// What the call is for, in its errors; put into words only when one is thrown.
    var purpose: Purpose

    /// What a call is for: fixed words, or the words a lookup (made on every lookup, and
    /// needed only for an error) is described by, made when asked.
    enum Purpose {
        case text(String)
        case lookingUp(String)
    }

    /// A call for `purpose`.
    init(operation: NameOperation, fields: [MessageComponent], wait: Duration = .zero, purpose: Purpose) {
        self.operation = operation
        self.fields = fields
        self.wait = wait
        self.purpose = purpose
    }

    /// A call whose purpose is `what`.
    init(operation: NameOperation, fields: [MessageComponent], wait: Duration = .zero, what: String) {
        self.init(operation: operation, fields: fields, wait: wait, purpose: .text(what))
    }

    /// What the call is for, in words.
    var what: String {
        switch purpose {
        case .text(let text): text
        case .lookingUp(let name): "looking up '\(name)'"
        }
    }

    /// The request message: id = operation, one component per field.
    var message: Message { Message(id: operation.rawValue, components: fields) }

    /// `register`: the port travels as any port does (the server receives a connection into
    /// it); a scope other than `.host` goes as a trailing field.
    static func register(
        _ name: String, _ port: ReceivePort, scope: NameScope, terms: RegisterTerms = RegisterTerms(), notices: ReceivePort? = nil,
        again: Bool = false
    ) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        var fields = [NameField.string(name), .port(port.makeSendPort())]
        if scope != .host || !terms.isPlain { fields.append(NameField.integer(scope.rawValue)) }
        if !terms.isPlain {
            fields += [NameField.integer(terms.flags), try RequirementField.encode(terms.requirement)]
            if let notices { fields.append(.port(notices.makeSendPort())) }
        }
        return NameCall(operation: .register, fields: fields, what: again ? "registering '\(name)' again" : "registering '\(name)'")
    }

    /// `registerSame`: `name` for the port this connection registered as `held`, which
    /// is not sent again.
    static func registerSame(_ name: String, as held: String, scope: NameScope, again: Bool = false) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        var fields = [NameField.string(name), NameField.string(held)]
        if scope != .host { fields.append(NameField.integer(scope.rawValue)) }
        return NameCall(
            operation: .registerSame, fields: fields, what: again ? "registering '\(name)' again" : "registering '\(name)'")
    }

    /// `unregister`.
    static func unregister(_ name: String) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        return NameCall(operation: .unregister, fields: [NameField.string(name)], what: "releasing '\(name)'")
    }

    /// `lookup` or `owner(of:)`, waiting up to `wait` for the name. `owner` asks for a name
    /// other nodes hold too (its reply then ends with the node), which a server outside a
    /// cluster, or one older than the field, ignores.
    static func lookup(_ operation: NameOperation, _ name: String, _ wait: Duration?) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        // `nil`: as long as it takes, which the server bounds at a day.
        let wait = wait.map { max($0, .zero) } ?? .milliseconds(Int64(maxLookupWaitMilliseconds))
        let milliseconds = UInt64(min((wait / .milliseconds(1)).rounded(.up), Double(maxLookupWaitMilliseconds)))
        var fields = [NameField.string(name), NameField.integer(milliseconds)]
        if operation == .owner { fields.append(NameField.withOtherNodes) }
        return NameCall(operation: operation, fields: fields, wait: wait, purpose: .lookingUp(name))
    }

    /// `list`, with the names other nodes hold when the server is a cluster's node.
    static let list = NameCall(operation: .list, fields: [NameField.withOtherNodes], what: "listing names")
}

/// How a client registers a name for a port: naming another name its connection holds for
/// the port (`registerSame`), when there is one, so that the port is not sent again; else,
/// or when the server refuses that only because it does not hold that name (any more) or
/// predates the operation, sending the port (`register`).
struct RegisterAttempts {
    private let first: NameCall
    private let held: String?
    private let withPort: NameCall

    /// - Parameter held: a name the connection holds for `port`, if any.
    init(
        _ name: String, _ port: ReceivePort, scope: NameScope, held: String?, terms: RegisterTerms = RegisterTerms(),
        notices: ReceivePort? = nil, again: Bool = false
    ) throws(NameServerError) {
        withPort = try NameCall.register(name, port, scope: scope, terms: terms, notices: notices, again: again)
        // Terms travel with a `register` only: `registerSame` has no field for them.
        let held = terms.isPlain ? held : nil
        self.held = held
        if let held {
            first = try NameCall.registerSame(name, as: held, scope: scope, again: again)
        } else {
            first = withPort
        }
    }

    /// Sends the first request through `request`, and the port after it if need be.
    func send(_ request: (NameCall) throws(NameServerError) -> Void) throws(NameServerError) {
        do {
            try request(first)
        } catch {
            guard let retry = retry(after: error) else { throw error }
            try request(retry)
        }
    }

    /// `send(_:)`, for a request that suspends.
    func send(_ request: (NameCall) async throws(NameServerError) -> Void) async throws(NameServerError) {
        do {
            try await request(first)
        } catch {
            guard let retry = retry(after: error) else { throw error }
            try await request(retry)
        }
    }

    /// The request to send after `first` failed with `error`, if there is one to try.
    private func retry(after error: NameServerError) -> NameCall? {
        guard let held else { return nil }
        switch error {
        case .notFound(let name), .notOwner(let name, _): return name == held ? withPort : nil
        case .protocolError: return withPort
        default: return nil
        }
    }
}
