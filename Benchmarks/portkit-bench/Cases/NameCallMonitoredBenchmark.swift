import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitLocks

extension NameBenchmarks {
    /// `names.call`'s `portkit` and `portkit-monitored`: requests through the send port a
    /// lookup returned; `monitored`, while a monitor watches the name. Its lookup is then
    /// made after the monitor attached, so the connection goes through the server's tap:
    /// what a monitor costs the traffic it sees (`portkit` is the cost when nobody monitors).
    static func lookedUpCall(_ impl: String, count: Int, _ request: Message, monitored: Bool) -> BenchmarkImpl {
        BenchmarkImpl(impl) {
            let fixture = try NameFixture()
            let watcher = monitored ? try NameServerClient.blockingConnect(to: fixture.address) : nil
            let drain = try watcher.map { try MonitorDrain($0, name: fixture.name) }
            let client = try NameServerClient.blockingConnect(to: fixture.address)
            let port = try client.blockingLookup(fixture.name)
            return .init(
                measure: { try PortBenchmarks.medianRequestMicroseconds(count, request, to: port, size: callSize) },
                stop: {
                    port.invalidate()
                    client.close()
                    drain?.stop()
                    watcher?.close()
                    fixture.stop()
                })
        }
    }
}

/// A monitor whose events a task takes as they come (and counts), as `portname monitor`
/// would print them.
private final class MonitorDrain: Sendable {
    private enum Phase {
        case starting
        case running(NameMonitor)
        case failed(NameServerError)
        case ended
    }

    private let phase = ConditionLock(Phase.starting)
    private let task: Task<Void, Never>

    init(_ client: NameServerClient, name: String) throws {
        let phase = self.phase
        task = Task {
            do throws(NameServerError) {
                let monitor = try await client.monitor([name])
                phase.withLock { $0 = .running(monitor) }
                phase.broadcast()
                for try await _ in monitor {}
            } catch {
                phase.withLock { if case .starting = $0 { $0 = .failed(error) } }
            }
            phase.withLock { if case .starting = $0 { $0 = .ended } }
            phase.broadcast()
        }
        let started = phase.wait(until: .now + .seconds(10)) { phase -> Result<Void, NameServerError>? in
            switch phase {
            case .starting: nil
            case .running: .success(())
            case .failed(let error): .failure(error)
            case .ended: .failure(.transport(.cancelled))
            }
        }
        guard let started else { throw BenchmarkError.timedOut("starting a monitor") }
        try started.get()
    }

    func stop() {
        if case .running(let monitor) = phase.withLock({ $0 }) { monitor.cancel() }
        task.cancel()
    }
}
