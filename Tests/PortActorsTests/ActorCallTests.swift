import Glibc
import PortActors
import PortActorsTestActors
import PortKitTestSupport
import Testing
import PortKitLocks

/// Calls between real processes: an actor system in a child (`portactors-test-helper`)
/// serving a `Worker` on a permanent thread and a `Recorder` on the default executor,
/// found by name through a name server of the test's process.
@Suite("Actor calls across processes", .serialized)
struct ActorCallTests {
    @Test func aResolvedActorIsCalledInItsProcessOnItsThread() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let (child, system) = (served.child, served.system)

        let worker = try await system.resolve(name: "worker", as: Worker.self)
        #expect(worker.id.name == "worker")
        #expect(worker.id.pid == child.pid)
        #expect(worker.id.node == nil)
        #expect(try await worker.move(Point(x: 1, y: 2, label: "p")) == Point(x: 2, y: 4, label: "p!"))
        #expect(try await worker.pid() == child.pid)
        #expect(try await worker.runsOnItsThread())
        // Resolved twice, one actor: equal identities.
        let again = try await system.resolve(name: "worker", as: Worker.self)
        #expect(again.id == worker.id)
    }

    @Test func thrownErrorsComeBackAsThemselvesOrNamed() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let (child, system) = (served.child, served.system)
        let worker = try await system.resolve(name: "worker", as: Worker.self)

        await #expect(throws: Refusal(reason: "not today")) { try await worker.refuse("not today") }
        do {
            try await worker.failOpaquely()
            Issue.record("failOpaquely returned")
        } catch let error as PortActorError {
            guard case .remoteError(let type, let description) = error else { throw error }
            #expect(type.hasSuffix("OpaqueFailure"))
            #expect(description == "opaque failure")
        }
        // The actor is still there after both.
        #expect(try await worker.pid() == child.pid)
    }

    @Test func namesThatAreMissingTakenOrNotActorsGiveTypedErrors() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let (names, child, system) = (served.names, served.child, served.system)

        await #expect(throws: PortActorError.names(.notFound(name: "nobody"))) {
            _ = try await system.resolve(name: "nobody", as: Worker.self)
        }
        let thread = PermanentThread(name: "local-worker")
        try thread.run()
        defer { thread.stop() }
        let local = Worker(actorSystem: system, thread: thread)
        await #expect(throws: PortActorError.names(.nameTaken(name: "worker", ownerPID: child.pid))) {
            try await system.register(local, as: "worker")
        }
        await #expect(throws: PortActorError.names(.invalidName(name: "two words", reason: .whitespace))) {
            try await system.register(local, as: "two words")
        }
        await #expect(throws: PortActorError.names(.invalidName(name: "a/b", reason: .slash))) {
            _ = try await system.resolve(name: "a/b", as: Worker.self)
        }
        // A refused name leaves nothing behind: the actor takes a good one.
        try await system.register(local, as: "local-worker")
        #expect(try await system.resolve(name: "local-worker", as: Worker.self) === local)
        // A plain port under a name is no actor.
        let plainClient = try NameServerClient.blockingConnect(to: names.address)
        defer { plainClient.close() }
        let plain = ReceivePort()
        try plain.schedule(on: try #require(thread.loop)) { Message(id: $0.id, text: "not an actor") }
        defer { plain.invalidate() }
        try await plainClient.register("plain", port: plain)
        await #expect(throws: PortActorError.notAnActor(name: "plain")) {
            _ = try await system.resolve(name: "plain", as: Worker.self)
        }
    }

    @Test func anActorOfThisProcessResolvesToItself() async throws {
        let names = try TestNames()
        let system = try names.system()
        defer { system.shutDown() }
        let recorder = Recorder(actorSystem: system)
        try await system.register(recorder, as: "here")
        let found = try await system.resolve(name: "here", as: Recorder.self)
        #expect(found === recorder)
        #expect(!__isRemoteActor(found))
    }

    /// A system does not keep an actor alive that no name keeps (`Unretained`), and finds it
    /// while it lives; once it is gone its id resolves to no local actor.
    @Test func anActorWithoutANameIsNotKeptAliveByItsSystem() throws {
        let system = try PortActorSystem()
        defer { system.shutDown() }
        var recorder: PortActorsTestActors.Recorder? = Recorder(actorSystem: system)
        let id = try #require(recorder?.id)
        #expect(try system.resolve(id: id, as: Recorder.self) === recorder)
        weak let released = recorder
        recorder = nil
        #expect(released == nil)
        #expect(try system.resolve(id: id, as: Recorder.self) == nil)
    }

    @Test func twoSystemsOfOneProcessCallEachOtherThroughTheirPorts() async throws {
        let names = try TestNames()
        let owner = try names.system()
        defer { owner.shutDown() }
        let caller = try names.system()
        defer { caller.shutDown() }
        let recorder = Recorder(actorSystem: owner)
        try await owner.register(recorder, as: "next-door")
        let found = try await caller.resolve(name: "next-door", as: Recorder.self)
        #expect(__isRemoteActor(found))
        #expect(found.id == recorder.id)
        try await found.recordWaiting(7)
        #expect(try await recorder.values() == [7])
    }

    @Test func aFileDescriptorArgumentIsUsableOnTheOtherSide() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let (names, system) = (served.names, served.system)
        let worker = try await system.resolve(name: "worker", as: Worker.self)

        let path = names.directory.path + "/passed.txt"
        let fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        let text = "written by \(getpid())"
        #expect(write(fd, text, text.utf8.count) == text.utf8.count)
        unlink(path)  // only the descriptor leads to the file now
        #expect(try await worker.read(TransferableDescriptor(fd)) == text)
    }

    @Test func aSendPortArgumentReachesItsReceivePort() async throws {
        let served = try ServedActorProcess("worker")
        defer { served.stop() }
        let system = served.system
        let worker = try await system.resolve(name: "worker", as: Worker.self)

        let thread = PermanentThread(name: "test-port")
        try thread.run()
        defer { thread.stop() }
        let received = Locked<[String]>([])
        let port = ReceivePort()
        try port.schedule(on: try #require(thread.loop)) { message in
            received.withLock { $0.append(message.text) }
            return nil
        }
        defer { port.invalidate() }
        #expect(try await worker.tell(TransferablePort(port.makeSendPort()), "through the port"))
        #expect(eventually { received.withLock { $0 } == ["through the port"] })
    }
}
