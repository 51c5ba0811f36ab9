import Glibc
import NamedPortServer
import PortMessaging
import Synchronization

/// How the name server's cost grows: with the names it holds, and with the clients it serves
/// at once. Each server is embedded in this process, as in `NameBenchmarks`.
extension ScaleBenchmarks {
    // MARK: scale.names

    /// `scale.names`: the median (and p99) lookup on a kept connection, of a random one of
    /// `size` names a child process registered (each lookup brokers a connection to the child's
    /// port). A hash table should make it flat. The names share the one port, so the server
    /// holds one connection to it (and its hang-up watch) whatever their number. The child
    /// runs on the last CPU, so that where its adopting and closing of the brokered
    /// connections runs does not change from run to run.
    static func names(sizes: [Int], lookups: Int) -> BenchmarkCase {
        BenchmarkCase(name: "scale.names", unit: "µs", impls: sizes.map { size in
            BenchmarkImpl("names-\(size)", size: size) {
                let server = try NameFixture(policy: NameServerPolicy(maxNamesPerConnection: size))
                let filler: LineChild
                do {
                    filler = try CPUAffinity.onLastCPU {
                        try LineChild(
                            BenchProcess.executable, ["--child", "name-filler", server.address, "\(size)"], discardingErrors: false)
                    }
                } catch {
                    server.stop()
                    throw error
                }
                let stopAll = {
                    filler.stop()
                    server.stop()
                }
                let client: NameServerClient
                do {
                    guard try filler.readLine(timeout: .seconds(300)) == "ready" else {
                        throw BenchmarkError.timedOut("the name filler to register \(size) names")
                    }
                    client = try NameServerClient.blockingConnect(to: server.address)
                } catch {
                    stopAll()
                    throw error
                }
                var choice = RandomChoice()
                return .init(
                    measure: {
                        try NameBenchmarks.medianMicroseconds(lookups) {
                            let name = BenchChildren.fillerName(choice.next(below: size))
                            let start = ContinuousClock.now
                            let port = try client.blockingLookup(name)
                            let elapsed = start.duration(to: .now)
                            port.invalidate()
                            return elapsed
                        }
                    },
                    stop: {
                        client.close()
                        stopAll()
                    })
            }
        })
    }

    // MARK: scale.clients

    /// `scale.clients`: lookups per second through one server from `size` clients at once,
    /// each a connection of its own and a task that looks up the name `lookups / size` times
    /// (at least once), all tasks started together.
    static func clients(sizes: [Int], lookups: Int) -> BenchmarkCase {
        BenchmarkCase(name: "scale.clients", unit: "lookups/s", impls: sizes.map { size in
            clientsImpl(size: size, lookups: lookups) { run in RunSample(value: run.rate) }
        })
    }

    /// `scale.clients-latency`: the same runs, each lookup's time: the median and p99 in µs.
    static func clientsLatency(sizes: [Int], lookups: Int) -> BenchmarkCase {
        BenchmarkCase(name: "scale.clients-latency", unit: "µs", impls: sizes.map { size in
            clientsImpl(size: size, lookups: lookups) { run in RunSample(latencies: run.latencies) }
        })
    }

    private static func clientsImpl(size: Int, lookups: Int, sample: @escaping (ConcurrentLookups) -> RunSample) -> BenchmarkImpl {
        BenchmarkImpl("clients-\(size)", size: size) {
            try requireDescriptors(4 * size + 512, for: "\(size) clients and their server's connections in one process")
            let fixture = try NameFixture()
            let clients: [NameServerClient]
            do {
                clients = try (0..<size).map { _ in try NameServerClient.blockingConnect(to: fixture.address) }
            } catch {
                fixture.stop()
                throw error
            }
            let each = max(1, lookups / size)
            return .init(
                measure: { sample(try ConcurrentLookups.run(clients, each: each, name: fixture.name)) },
                stop: {
                    for client in clients { client.close() }
                    fixture.stop()
                })
        }
    }

    /// Throws `notMeasurable` unless the process may open `count` descriptors (raising its
    /// soft limit up to the hard one if need be).
    static func requireDescriptors(_ count: Int, for what: String) throws {
        var limit = rlimit()
        guard getrlimit(descriptorLimit, &limit) == 0 else { throw BenchmarkError.lastSystemError("getrlimit") }
        if limit.rlim_cur >= rlim_t(count) { return }
        guard limit.rlim_max >= rlim_t(count) else {
            throw BenchmarkError.notMeasurable("\(what) needs \(count) descriptors; RLIMIT_NOFILE allows \(limit.rlim_max)")
        }
        limit.rlim_cur = rlim_t(count)
        guard setrlimit(descriptorLimit, &limit) == 0 else { throw BenchmarkError.lastSystemError("setrlimit") }
    }

    private static var descriptorLimit: __rlimit_resource_t { __rlimit_resource_t(RLIMIT_NOFILE.rawValue) }
}

/// One run of `scale.clients`: every client's task looks the name up `each` times, all at once.
private struct ConcurrentLookups: Sendable {
    /// Lookups per second over the whole run.
    let rate: Double
    /// Each lookup's time, in µs.
    let latencies: [Double]

    static func run(_ clients: [NameServerClient], each: Int, name: String) throws -> ConcurrentLookups {
        let done = Handoff<Result<ConcurrentLookups, NameServerError>>()
        Task {
            let start = ContinuousClock.now
            do throws(NameServerError) {
                let latencies = try await lookUp(clients, each: each, name: name)
                let seconds = start.duration(to: .now).microseconds / 1e6
                done.put(.success(ConcurrentLookups(rate: Double(latencies.count) / seconds, latencies: latencies)))
            } catch {
                done.put(.failure(error))
            }
        }
        return try done.take(within: .seconds(300), what: "\(clients.count) clients' lookups").get()
    }

    private static func lookUp(_ clients: [NameServerClient], each: Int, name: String) async throws(NameServerError) -> [Double] {
        let outcome = await withTaskGroup(of: Result<[Double], NameServerError>.self) { group in
            for client in clients {
                group.addTask {
                    var times: [Double] = []
                    times.reserveCapacity(each)
                    do throws(NameServerError) {
                        for _ in 0..<each {
                            let start = ContinuousClock.now
                            let port = try await client.lookup(name)
                            times.append(start.duration(to: .now).microseconds)
                            port.invalidate()
                        }
                        return .success(times)
                    } catch {
                        return .failure(error)
                    }
                }
            }
            var all: [Double] = []
            for await result in group {
                switch result {
                case .success(let times): all += times
                case .failure(let error): return Result<[Double], NameServerError>.failure(error)
                }
            }
            return .success(all)
        }
        return try outcome.get()
    }
}
