/// Activatable names: those the server's service files declare, whose lookup starts their
/// service when the name is absent (docs/NAMES.md, "Services started on demand").
extension NameServerClient {
    /// The names the server can start a service for, sorted: each has a service file in
    /// one of its service directories (registered now or not).
    /// - Throws: `protocolError` from a server that predates activation; `permissionDenied`,
    ///   `transport` (time-outs), `connectionLost`.
    public func blockingActivatableNames() throws(NameServerError) -> [String] {
        var fields = try blockingRequest(NameCall.activatable)
        return Self.names(try fields.string())
    }

    /// `blockingActivatableNames()`, suspending while the server answers.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func activatableNames() async throws(NameServerError) -> [String] {
        var fields = try await request(NameCall.activatable)
        return Self.names(try fields.string())
    }

    private static func names(_ text: String) -> [String] {
        text.split(separator: "\n").map(String.init)
    }
}

extension NameCall {
    /// `activatable`: the names the server's service files declare.
    static let activatable = NameCall(operation: .activatable, fields: [], what: "listing activatable names")
}
