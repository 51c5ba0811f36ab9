import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitSystem

/// `names.activation`: a lookup of an absent activatable name until its first reply, the
/// server starting the service from its service file, against D-Bus activation of a
/// `.service` file through the private bus (`StartServiceByName`, answered once the service
/// owns the name), and the floor of both: a spawn of the same service binary until it says
/// over a pipe that it runs. The service binaries are as small as each side makes them: a
/// C program with libdbus for D-Bus, `portkit-bench-service` (PortKit's name client, no
/// Foundation) for PortKit. Process start dominates: a Swift program loads the Swift
/// runtime's shared libraries, which a C one does not, so its floor is the larger; built
/// with `--static-swift-stdlib` (and named by `PORTKIT_BENCH_SERVICE`) it loads none of them.
enum NameActivationBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        [activation(count: scale.count(30, quick: 3))]
    }

    static let name = "bench.activated"

    static func activation(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.activation", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try ActivationFixture()
                return .init(measure: { try fixture.measure(count) }, stop: fixture.stop)
            },
            BenchmarkImpl("dbus") {
                guard access(DBusPeer.servicePath, X_OK) == 0 else {
                    throw BenchmarkError.notMeasurable("no D-Bus service at \(DBusPeer.servicePath) (scripts/bench-setup.sh builds it)")
                }
                let peer = try DBusPeer()
                return .init(measure: { try peer.run("activation \(count)") }, stop: peer.stop)
            },
            // dbus-broker does not start a servicedir's services itself: dbus-broker-launch
            // asks systemd to (a transient unit for an Exec= service), and the bench's
            // private broker runs without systemd.
            BenchmarkImpl("dbus-broker") {
                throw BenchmarkError.notMeasurable("dbus-broker starts activatable services only through systemd, which the bench's private broker has not")
            },
            BenchmarkImpl("floor", measure: { try spawnUntilReady(ActivationFixture.servicePath, count) }),
            BenchmarkImpl("floor-dbus-service") {
                guard access(DBusPeer.servicePath, X_OK) == 0 else {
                    throw BenchmarkError.notMeasurable("no D-Bus service at \(DBusPeer.servicePath) (scripts/bench-setup.sh builds it)")
                }
                return .init(measure: { try spawnUntilReady(DBusPeer.servicePath, count) })
            },
        ])
    }

    /// The median of `count` spawns of `executable` with `PORTKIT_READY_FD=3` until it writes
    /// its byte to the pipe at its descriptor 3 (then it exits, and is reaped, not timed).
    static func spawnUntilReady(_ executable: String, _ count: Int) throws -> RunSample {
        guard access(executable, X_OK) == 0 else { throw BenchmarkError.notMeasurable("no \(executable)") }
        let environment = SpawnedChild.currentEnvironment + ["PORTKIT_READY_FD=3"]
        return try NameBenchmarks.medianMicroseconds(count) {
            let pipe = try FileDescriptor.pipe()
            defer { try? pipe.read.close() }
            let start = ContinuousClock.now
            let child: SpawnedChild
            do {
                child = try SpawnedChild.spawn(executable, environment: environment, descriptors: [(pipe.write, 3)])
            } catch {
                try? pipe.write.close()
                throw error
            }
            try? pipe.write.close()
            var byte: UInt8 = 0
            let read = try withUnsafeMutableBytes(of: &byte) { try pipe.read.read(into: $0) }
            let elapsed = start.duration(to: .now)
            _ = try child.wait()
            guard read == 1 else { throw BenchmarkError.system(operation: "\(executable) did not say it runs", errno: EPIPE) }
            return elapsed
        }
    }
}

/// An embedded name server whose one service directory makes `bench.activated` activatable,
/// its `Exec=` being `portkit-bench-service`, and a client of it.
final class ActivationFixture: Sendable {
    let directory: String
    let server: NameServer
    let client: NameServerClient

    /// `portkit-bench-service` beside this executable (`swift build -c release --product
    /// portkit-bench-service`), or the one `PORTKIT_BENCH_SERVICE` names.
    static var servicePath: String {
        if let path = getenv("PORTKIT_BENCH_SERVICE") { return String(cString: path) }
        return BenchProcess.executable.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
            + "/portkit-bench-service"
    }

    init() throws {
        guard access(Self.servicePath, X_OK) == 0 else {
            throw BenchmarkError.notMeasurable(
                "no \(Self.servicePath) (swift build -c release --product portkit-bench-service, or PORTKIT_BENCH_SERVICE)")
        }
        directory = try BenchFiles.temporaryDirectory("portkit-bench-activation")
        guard mkdir(directory + "/services", 0o700) == 0 else { throw BenchmarkError.lastSystemError("mkdir") }
        let name = NameActivationBenchmarks.name
        try BenchFiles.write("Name=\(name)\nExec=\(Self.servicePath)\n", to: "\(directory)/services/\(name).service")
        var policy = NameServerPolicy()
        policy.serviceDirectories = [directory + "/services"]
        server = try NameServer.start(at: directory + "/names.sock", policy: policy)
        client = try NameServerClient.blockingConnect(to: directory + "/names.sock")
    }

    /// The median of `count` lookups of the absent name until their reply. Between them,
    /// not timed: the looker closes its port, and the service, idle, exits.
    func measure(_ count: Int) throws -> RunSample {
        let name = NameActivationBenchmarks.name
        return try NameBenchmarks.medianMicroseconds(count) {
            let deadline = ContinuousClock.now + .seconds(10)
            while try client.blockingList().contains(where: { $0.name == name }) {
                guard ContinuousClock.now < deadline else { throw BenchmarkError.timedOut("the activated service to exit") }
                usleep(200)
            }
            let start = ContinuousClock.now
            let port = try client.blockingLookup(name)
            let elapsed = start.duration(to: .now)
            port.invalidate()
            return elapsed
        }
    }

    func stop() {
        client.close()
        server.stop()
        unlink("\(directory)/services/\(NameActivationBenchmarks.name).service")
        rmdir(directory + "/services")
        rmdir(directory)
    }
}
