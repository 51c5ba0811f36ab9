import Glibc
import PortActors
import PortActorsTestActors
import PortKitTestSupport
import Testing
import PortKitLocks

/// What happens around calls between real processes: a process killed mid-call, a
/// cancelled call, the order of many calls, the end of an actor watched, a restarted name
/// server.
@Suite("Actor lifecycle across processes", .serialized)
struct ActorLifecycleTests {
    @Test func aCallerGetsPeerDiedWhenTheActorsProcessIsKilledMidCall() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let (child, system) = (served.child, served.system)
        let worker = try await system.resolve(name: "worker", as: Worker.self)
        let ended = Locked<ActorAddress?>(nil)
        try system.whenTerminated(worker) { address in ended.withLock { $0 = address } }

        let call = Task { try await worker.wait(seconds: 600) }
        #expect(try await offThePool { try child.readLine(within: .seconds(60)) } == "waiting")
        child.signal(SIGKILL)
        let outcome = await call.result
        #expect(throws: PortActorError.transport(.peerDied)) { try outcome.get() }
        #expect(eventually { ended.withLock { $0 } == worker.id })
        #expect(try child.wait() == .signalled(SIGKILL))
        // Later calls fail at once the same way.
        await #expect(throws: PortActorError.transport(.peerDied)) { _ = try await worker.pid() }
    }

    @Test func aCancelledCallReturnsAtOnceAndTheRemoteTaskIsCancelled() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let (child, system) = (served.child, served.system)
        let worker = try await system.resolve(name: "worker", as: Worker.self)

        let call = Task { try await worker.wait(seconds: 600) }
        #expect(try await offThePool { try child.readLine(within: .seconds(60)) } == "waiting")
        let cancelled = ContinuousClock.now
        call.cancel()
        let outcome = await call.result
        let took = ContinuousClock.now - cancelled
        #expect(throws: PortActorError.transport(.cancelled)) { try outcome.get() }
        // At once: no reply is waited for (generous for a busy machine).
        #expect(took < .seconds(5), "the cancelled call returned after \(took)")
        // The remote call's task saw its cancellation.
        #expect(try await offThePool { try child.readLine(within: .seconds(60)) } == "cancelled")
        // The actor serves on.
        #expect(try await worker.pid() == child.pid)
    }

    @Test(arguments: ["thread", "default"])
    func callsFromOneCallerRunInTheOrderMade(executor: String) async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let system = served.system
        let count = 10_000
        let values: [Int]
        if executor == "thread" {
            let worker = try await system.resolve(name: "worker", as: Worker.self)
            // One-way calls, then calls waited for, then one-way again: one order for all.
            for value in 0..<count / 2 { try await worker.record(value) }
            for value in count / 2..<count * 3 / 4 { try await worker.recordWaiting(value) }
            for value in count * 3 / 4..<count { try await worker.record(value) }
            values = try await worker.values()
        } else {
            let recorder = try await system.resolve(name: "worker.recorder", as: Recorder.self)
            for value in 0..<count / 2 { try await recorder.record(value) }
            for value in count / 2..<count * 3 / 4 { try await recorder.recordWaiting(value) }
            for value in count * 3 / 4..<count { try await recorder.record(value) }
            values = try await recorder.values()
        }
        #expect(values.count == count)
        #expect(values == Array(0..<count), "first out of order at \(values.indices.first { values[$0] != $0 } ?? -1)")
    }

    @Test func anActorsEndIsToldWhenItsNameIsReleased() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let (names, child, system) = (served.names, served.child, served.system)
        let worker = try await system.resolve(name: "worker", as: Worker.self)

        let ended = Task { try await system.terminated(worker) }
        // The watch is set up before the name goes: wait until the server counts it.
        #expect(eventually { (try? names.server.counts().watches) == 1 })
        child.send("unregister")
        #expect(try await offThePool { try child.readLine(within: .seconds(60)) } == "unregistered")
        #expect(try await ended.value == worker.id)
    }

    @Test func aRegisteredActorIsReachableAgainAfterPortnamedRestarts() async throws {
        let directory = TestDirectory()
        let address = directory.address
        let portnamed = SpawnedProcess.product("portnamed")
        var daemon = try SpawnedProcess.spawn(portnamed, ["--address", address])
        #expect(try daemon.readLine(within: .seconds(60)) == "listening on \(address)")
        let child = try startActorProcess(address, "worker")
        defer { child.kill() }

        daemon.signal(SIGKILL)
        _ = try daemon.wait()
        daemon = try SpawnedProcess.spawn(portnamed, ["--address", address])
        defer { daemon.kill() }
        #expect(try daemon.readLine(within: .seconds(60)) == "listening on \(address)")

        // The child's system registers its actor again by itself; the same process answers.
        let system = try PortActorSystem(names: NameServerClient.blockingConnect(to: address))
        defer { system.shutDown() }
        let worker = try await system.resolve(name: "worker", as: Worker.self, waitingUpTo: .seconds(60))
        #expect(worker.id.pid == child.pid)
        #expect(try await worker.move(Point(x: 0, y: 0, label: "")) == Point(x: 1, y: 2, label: "!"))
    }
}
