import Glibc
import PortActors
import PortActorsTestActors
import PortKitTestSupport
import Testing

/// A name server in this process for one test, at a private address.
final class TestNames {
    let directory = TestDirectory()
    let server: NameServer

    init() throws {
        server = try NameServer.start(at: directory.address)
    }

    var address: String { directory.address }

    /// A system of the test's process, with a name server client of its own.
    func system(callTimeout: Duration? = nil) throws -> PortActorSystem {
        try PortActorSystem(names: NameServerClient.blockingConnect(to: address), callTimeout: callTimeout)
    }

    deinit { server.stop() }
}

/// A name server of the test's process, a child (`portactors-test-helper`) serving an
/// actor under a name there, and a system of the test's process to call it from; `stop()`
/// shuts the system down and kills the child.
final class ServedActorProcess {
    let names: TestNames
    let child: SpawnedProcess
    let system: PortActorSystem

    init(_ name: String) throws {
        names = try TestNames()
        child = try startActorProcess(names.address, name)
        do {
            system = try names.system()
        } catch {
            child.kill()
            throw error
        }
    }

    func stop() {
        system.shutDown()
        child.kill()
    }
}

/// Starts `portactors-test-helper serve ADDRESS NAME` and waits until it serves.
func startActorProcess(_ address: String, _ name: String, _ options: [String] = []) throws -> SpawnedProcess {
    let child = try SpawnedProcess.spawn(SpawnedProcess.product("portactors-test-helper"), ["serve", address, name] + options)
    let line = try child.readLine(within: .seconds(60))
    #expect(line == "serving \(name) \(child.pid)", "\(child.standardError())")
    return child
}

/// Runs `body` on a thread of its own and waits for it in the task: a blocking wait (a
/// child's output) that must not hold one of the few threads tasks run on.
func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = PermanentThread(name: "test-wait")
        do {
            try thread.run()
            try thread.execute {
                continuation.resume(with: Result { try body() })
                thread.stop()
            }
        } catch {
            continuation.resume(throwing: error)
        }
    }
}
