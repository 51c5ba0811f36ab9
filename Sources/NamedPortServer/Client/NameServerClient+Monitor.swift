import Glibc
import PermanentThread
import PortMessaging

/// Monitoring names' traffic, and the status of a name's owner.
extension NameServerClient {
    /// Starts a monitor of the messages to and from `patterns`: each a name, or a prefix
    /// followed by `*` (`"db.*"`; `"*"` is every name). The server then brokers each
    /// connection it makes to a matching name through a tap, and reports every message on
    /// it: `for try await event in try await names.monitor(["db"]) { … }`.
    ///
    /// Only the names' owner's user and root may monitor them: a name matched now that
    /// belongs to another user refuses the monitor; one registered later by another user
    /// is not reported to it.
    /// - Throws: `permissionDenied`, `invalidName` (a bad name or prefix),
    ///   `limitExceeded` (too many monitors on the connection), `protocolError` (a server
    ///   that predates monitors), `connectionLost`, `transport(.cancelled)`.
    public func monitor(_ patterns: [String]) async throws(NameServerError) -> NameMonitor {
        guard !patterns.isEmpty else { throw .protocolError("a monitor needs at least one name or prefix") }
        for pattern in patterns { try NameMonitor.validate(pattern: pattern) }
        let loop: ThreadLoop
        do { loop = try SharedReplyLoop.loop() } catch {
            throw .transport(error)
        }
        let (port, messages, end) = try NameMonitor.receiving(on: loop, address: address)
        do throws(NameServerError) {
            let fields = [NameField.integer(makeWatchID()), .port(port.makeSendPort())] + patterns.map(NameField.string)
            let call = NameCall(operation: .monitor, fields: fields, what: "monitoring \(patterns.joined(separator: " "))")
            var reply = try await request(call)
            return NameMonitor(patterns: patterns, initialOwners: try reply.owners(), port: port, messages: messages, end: end)
        } catch {
            port.invalidate()
            throw error
        }
    }

    /// What the server knows of `name`'s owner: its pid, uid and gid, the executable it
    /// runs and its control group (as `/proc` tells the server), and what other features
    /// of the server report (`NameOwnerStatus`).
    /// - Throws: `notFound`, `invalidName`, `permissionDenied`, `protocolError` (a server
    ///   that predates it), `connectionLost`.
    public func blockingStatus(of name: String) throws(NameServerError) -> NameOwnerStatus {
        var fields = try blockingRequest(try NameCall.nameStatus(name))
        return try NameOwnerStatusFields.decode(name, &fields)
    }

    /// `blockingStatus(of:)`, suspending while the server answers.
    /// - Throws: as the blocking form; `transport(.cancelled)`.
    public func status(of name: String) async throws(NameServerError) -> NameOwnerStatus {
        var fields = try await request(try NameCall.nameStatus(name))
        return try NameOwnerStatusFields.decode(name, &fields)
    }
}

extension NameCall {
    /// `nameStatus`.
    static func nameStatus(_ name: String) throws(NameServerError) -> NameCall {
        try NameRules.validate(name)
        return NameCall(operation: .nameStatus, fields: [NameField.string(name)], what: "asking for the status of '\(name)'")
    }
}
