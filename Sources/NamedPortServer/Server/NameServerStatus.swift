import Glibc
import PortMessaging

/// What a name server says about itself when asked (`NameServerClient.status()`,
/// `portname status`): who it is, how long it has run, what it holds, what it refused.
public struct NameServerStatus: Hashable, Sendable {
    /// The server's process id.
    public var pid: Int32
    /// How long the server has been serving.
    public var uptime: Duration
    /// Client connections open now (the asking one included).
    public var connections: Int
    /// Registered names.
    public var names: Int
    /// Open watches.
    public var watches: Int
    /// Lookups waiting for their name.
    public var waitingLookups: Int
    /// Connections the server closed on the client since it started: over the connection
    /// limit, a broken protocol, output not read.
    public var refusedConnections: Int
    /// Requests refused since it started: permission denied, a limit reached, a name
    /// taken, an invalid name, a malformed request.
    public var refusedRequests: Int

    /// Makes a status record.
    public init(
        pid: Int32, uptime: Duration, connections: Int, names: Int, watches: Int, waitingLookups: Int,
        refusedConnections: Int, refusedRequests: Int
    ) {
        self.pid = pid
        self.uptime = uptime
        self.connections = connections
        self.names = names
        self.watches = watches
        self.waitingLookups = waitingLookups
        self.refusedConnections = refusedConnections
        self.refusedRequests = refusedRequests
    }
}

/// The counters behind a status reply and the events a server reports, kept by its core
/// on the server's thread.
struct ServerStatistics {
    let started = ContinuousClock.now
    var refusedConnections = 0
    var refusedRequests = 0
    /// Where events go; `nil` costs nothing but the check.
    let events: NameServerEventHandler?

    init(events: NameServerEventHandler?) { self.events = events }

    func report(_ event: @autoclosure () -> NameServerEvent) {
        events?(event())
    }

    /// Counts and reports a refused request; answers that are not refusals are ignored.
    mutating func refused(_ error: NameServerError, pid: Int32, uid: UInt32) {
        switch error {
        case .notFound, .waitTimedOut: return
        default: break
        }
        refusedRequests += 1
        report(.requestRefused(pid: pid, uid: uid, error: error))
    }

    /// Counts and reports a connection the server closed on its client.
    mutating func refusedConnection(pid: Int32, uid: UInt32, reason: String) {
        refusedConnections += 1
        report(.connectionRefused(pid: pid, uid: uid, reason: reason))
    }

    /// The fields of a status reply (docs/NAMES.md, operation 9).
    func fields(_ counts: NameServerCounts) -> [MessageComponent] {
        let uptime = ContinuousClock.now - started
        let milliseconds = Int(clamping: uptime.components.seconds) &* 1000
            &+ Int(uptime.components.attoseconds / 1_000_000_000_000_000)
        return [
            NameField.integer(getpid()), NameField.integer(milliseconds), NameField.integer(counts.connections),
            NameField.integer(counts.names), NameField.integer(counts.watches), NameField.integer(counts.waitingLookups),
            NameField.integer(refusedConnections), NameField.integer(refusedRequests),
        ]
    }
}

extension NameServerStatus {
    /// Reads the fields of a status reply.
    init(_ fields: inout NameFieldReader) throws(NameServerError) {
        func count(_ fields: inout NameFieldReader) throws(NameServerError) -> Int { Int(clamping: try fields.integer()) }
        pid = try fields.pid()
        uptime = .milliseconds(Int64(clamping: try fields.integer()))
        connections = try count(&fields)
        names = try count(&fields)
        watches = try count(&fields)
        waitingLookups = try count(&fields)
        refusedConnections = try count(&fields)
        refusedRequests = try count(&fields)
    }
}

extension NameServerClient {
    /// What the server holds and has refused since it started.
    /// - Throws: `permissionDenied`, `transport` (time-outs), `connectionLost`.
    public func status() throws(NameServerError) -> NameServerStatus {
        var fields = try blockingRequest(.status, [], describing: "asking for the status")
        return try NameServerStatus(&fields)
    }
}
