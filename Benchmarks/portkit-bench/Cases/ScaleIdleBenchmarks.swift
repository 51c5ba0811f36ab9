import Synchronization

/// What idle clients cost a name server in memory, and whether it gives the memory back: a
/// real `portnamed` process (`PortnamedProcess`) against a private `dbus-broker`
/// (`DBusBrokerProcess`), each started afresh for every run, its resident set (`VmRSS`) read
/// from `/proc` before any client, with the clients connected and idle, and after they left.
/// The clients live in this process: `NameServerClient`s that listed the names once, or raw
/// D-Bus connections that said hello.
extension ScaleBenchmarks {
    /// The servers compared, by impl name, and how to start one.
    private static let idleServers: [(name: String, start: @Sendable () throws -> any IdleServer)] = [
        ("portkit", { try PortnamedProcess() }),
        ("dbus-broker", { try DBusBrokerProcess() }),
    ]

    /// How long a server may take to see a round's clients come or go.
    static let idleClientsTimeout = Duration.seconds(60)

    // MARK: scale.idle-server

    /// `scale.idle-server`: a server's resident set, in KiB, once it accepts connections and
    /// has settled, before any client: what running it costs a host. The `portnamed` is this
    /// build's (the Swift runtime linked as shared libraries); `PORTKIT_PORTNAMED` names
    /// another, such as the installed one (`scripts/install.sh`: the runtime linked in, of
    /// which only the pages used are resident).
    static func idleServer() -> BenchmarkCase {
        BenchmarkCase(name: "scale.idle-server", unit: "KiB", impls: idleServers.map { server in
            BenchmarkImpl(server.name) {
                try server.start().stop()
                return .init(measure: {
                    let running = try server.start()
                    defer { running.stop() }
                    return Double(try ProcessProbe.settledResidentKiB(of: running.pid))
                })
            }
        })
    }

    // MARK: scale.idle-connections

    /// `scale.idle-connections`: how much the server's resident set grows per idle client
    /// connection, in bytes, with `clients` of them connected: (resident set with them −
    /// resident set before) / `clients`.
    static func idleConnections(clients: Int) -> BenchmarkCase {
        BenchmarkCase(name: "scale.idle-connections", unit: "B/conn", impls: idleServers.map { server in
            BenchmarkImpl(server.name) {
                try checkIdleServer(server.start, clients: clients)
                return .init(measure: {
                    let run = try IdleRounds.run(server.start, clients: clients, rounds: 1)
                    return Double(run.withClients[0] - run.before) * 1024 / Double(clients)
                })
            }
        })
    }

    // MARK: scale.idle-connections-rounds

    /// `scale.idle-connections-rounds`: the server's resident set, in KiB, before any client
    /// (size 0) and after each of `rounds` rounds of `clients` clients connecting, idling and
    /// leaving (size: the clients that have come and gone). Flat is the goal: a server should
    /// give back, or at least reuse, what its clients took.
    static func idleConnectionsRounds(clients: Int, rounds: Int) -> BenchmarkCase {
        let impls = idleServers.flatMap { server -> [BenchmarkImpl] in
            let series = IdleRoundSeries(start: server.start, clients: clients, rounds: rounds)
            return (0...rounds).map { round in
                BenchmarkImpl("\(server.name)-\(round * clients)", size: round * clients) {
                    try series.check()
                    return .init(measure: { try series.next(round) })
                }
            }
        }
        return BenchmarkCase(name: "scale.idle-connections-rounds", unit: "KiB", impls: impls)
    }

    /// Starts and stops one server (throwing `notMeasurable` when it cannot start here) and
    /// makes sure this process may hold `clients` connections.
    fileprivate static func checkIdleServer(_ start: () throws -> any IdleServer, clients: Int) throws {
        try requireDescriptors(2 * clients + 512, for: "\(clients) idle clients in one process")
        try start().stop()
    }
}

/// One run of the idle-connections cases: a fresh server, and its resident set before any
/// client, then for each round with the clients connected and once they have all left.
struct IdleRounds {
    /// KiB before the first round.
    var before: Int
    /// KiB with each round's clients connected and idle.
    var withClients: [Int] = []
    /// KiB once each round's clients have left (the server saw them go) and its memory has
    /// settled (`ProcessProbe.settledResidentKiB`: a server may give freed memory back a
    /// moment after a crowd leaves, as `portnamed` does).
    var after: [Int] = []

    /// Starts a server with `start`, runs `rounds` rounds of `clients` idle clients, stops it.
    /// - Throws: what starting, connecting or waiting throws.
    static func run(_ start: () throws -> any IdleServer, clients: Int, rounds: Int) throws -> IdleRounds {
        let server = try start()
        defer { server.stop() }
        var run = IdleRounds(before: try ProcessProbe.residentKiB(of: server.pid))
        for _ in 0..<rounds {
            let idle = try server.connectIdle(clients)
            do {
                try server.waitForClients(clients, within: ScaleBenchmarks.idleClientsTimeout)
                run.withClients.append(try ProcessProbe.residentKiB(of: server.pid))
            } catch {
                idle.close()
                throw error
            }
            idle.close()
            try server.waitForClients(0, within: ScaleBenchmarks.idleClientsTimeout)
            run.after.append(try ProcessProbe.settledResidentKiB(of: server.pid))
        }
        return run
    }
}

/// The runs of one server in `scale.idle-connections-rounds`, shared by its impls (one per
/// round): the first impl to find its round's queue empty makes a run, which queues a value
/// for every round, so each run gives every impl one sample whatever order they are asked in.
private final class IdleRoundSeries: Sendable {
    private let start: @Sendable () throws -> any IdleServer
    private let clients: Int
    private let rounds: Int
    /// Per round (0: before the first), the values not yet handed out; and whether the
    /// server could be started here (`nil`: not tried yet).
    private let state: Mutex<(pending: [[Double]], checked: Result<Void, Error>?)>

    init(start: @escaping @Sendable () throws -> any IdleServer, clients: Int, rounds: Int) {
        self.start = start
        self.clients = clients
        self.rounds = rounds
        state = Mutex((Array(repeating: [], count: rounds + 1), nil))
    }

    /// Throws what starting the server throws (`notMeasurable` when it is missing), trying
    /// only once for all the rounds' impls.
    func check() throws {
        if let checked = state.withLock({ $0.checked }) { return try checked.get() }
        let result = Result<Void, Error> { try ScaleBenchmarks.checkIdleServer(start, clients: clients) }
        state.withLock { $0.checked = result }
        try result.get()
    }

    /// The resident set after `round` rounds (0: before any), in KiB, of a run not yet
    /// handed to this round.
    func next(_ round: Int) throws -> Double {
        if let value = state.withLock({ $0.pending[round].isEmpty ? nil : $0.pending[round].removeFirst() }) { return value }
        let run = try IdleRounds.run(start, clients: clients, rounds: rounds)
        let values = [run.before] + run.after
        return state.withLock { state in
            for (index, value) in values.enumerated() { state.pending[index].append(Double(value)) }
            return state.pending[round].removeFirst()
        }
    }
}
