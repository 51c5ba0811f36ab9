import Glibc
import NamedPortServer
import PermanentThread
import PortActors
import PortMessaging

/// Distributed actors against the ports they travel on: a remote actor call with a small
/// struct argument and result, against a request of about the same bytes on a looked-up
/// port (`names.call`'s path, blocking and async), against a call of the same actor
/// when it is local (the hop to its permanent thread and back), and against the two floors
/// any distributed call over a socket stands on: an awaited request between threads over
/// a bare socket pair (`raw-async`), and the toolchain's distributed runtime, entered as
/// PortActors enters it, with a function call for its transport (`distributed-runtime`).
enum ActorBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        let call = call(count: scale.count(2000, quick: 100))
        let threadCall = threadCall(count: scale.count(2000, quick: 100))
        // The same with every thread of the process on one CPU: the code's cost without
        // the other CPU's wake-ups, reproducibly.
        return [
            call, call.pinned(.together, as: "actors.call-same-cpu"),
            threadCall, threadCall.pinned(.together, as: "actors.thread-call-same-cpu"),
        ]
    }

    /// About the bytes of an `actors.call` request (its envelope: call id, actor id, the
    /// target's mangled name, the point) and of its reply (a status and the point).
    static let requestSize = 96
    static let replySize = 32

    /// `actors.call`: `move(_:)` on a remote actor (another system of this process, found
    /// by name: its calls go over the brokered Unix socket as between processes), awaited
    /// from a task on the shared pool. The actor's thread is its system's loop thread, as
    /// the name owner's is in `names-call`.
    static func call(count: Int) -> BenchmarkCase {
        let point = BenchPoint(x: 1, y: 2, label: "bench")
        return BenchmarkCase(name: "actors.call", unit: "µs", impls: [
            actorCalls(count, fromCallerThread: false),
            namesCall(count: count),
            asyncNamesCalls(count, fromThread: false),
            // The floors of a distributed call: an awaited request between threads over a
            // bare socket pair, and the toolchain's distributed runtime, entered as PortActors
            // enters it (the target's types found once), with no transport.
            BenchmarkImpl("raw-async") {
                let requester = try RawAsyncRequester(requestSize: requestSize, replySize: replySize)
                let request = [UInt8](repeating: 7, count: requestSize)
                return .init(measure: { try timeCalls(count) { _ = await requester.request(request) } }, stop: requester.stop)
            },
            BenchmarkImpl("distributed-runtime") {
                let system = LoopbackActorSystem()
                system.served.withLock { $0 = LoopbackActor(actorSystem: system) }
                let remote = try LoopbackActor.resolve(id: 1, using: system)
                return .init(measure: { try timeCalls(count) { _ = try await remote.move(point) } })
            },
            BenchmarkImpl("local-actor") {
                let fixture = try ActorFixture()
                let local = fixture.actor
                return .init(
                    measure: { try timeCalls(count) { _ = try await local.move(point) } },
                    stop: fixture.stop)
            },
        ])
    }

    /// `actors.thread-call`: `actors.call` made by a task on the caller's own permanent
    /// thread (its system's, which reads the replies of the calls it makes), as an actor on
    /// that thread makes them: the reply is read and the task resumed by the same thread,
    /// with no hand-off to another. Against `names-call` (a thread blocked on its own reply)
    /// and `names-call-thread`: the same bytes as an async request from a task on a
    /// permanent thread whose loop reads the port's replies.
    static func threadCall(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "actors.thread-call", unit: "µs", impls: [
            actorCalls(count, fromCallerThread: true),
            namesCall(count: count),
            asyncNamesCalls(count, fromThread: true),
        ])
    }

    /// `portkit`: `count` calls of `move(_:)` on the remote actor, from a task on the
    /// caller's system's thread, or on the shared pool.
    static func actorCalls(_ count: Int, fromCallerThread: Bool) -> BenchmarkImpl {
        let point = BenchPoint(x: 1, y: 2, label: "bench")
        return BenchmarkImpl("portkit") {
            let fixture = try ActorFixture()
            let remote = try fixture.remote()
            let thread = fromCallerThread ? fixture.caller.thread : nil
            return .init(
                measure: { try timeCalls(count, on: thread) { _ = try await remote.move(point) } },
                stop: fixture.stop)
        }
    }

    /// `names-call-async` (`fromThread` false): the `names-call` request awaited from a task
    /// on the shared pool, its replies read by the process's shared reply loop;
    /// `names-call-thread`: awaited from a task on a permanent thread whose loop reads them.
    static func asyncNamesCalls(_ count: Int, fromThread: Bool) -> BenchmarkImpl {
        BenchmarkImpl(fromThread ? "names-call-thread" : "names-call-async") {
            let fixture = try NameFixture(replySize: replySize)
            let client = try NameServerClient.blockingConnect(to: fixture.address)
            let port = try client.blockingLookup(fixture.name)
            let thread = fromThread ? try readingThread(for: port) : nil
            let request = Message(id: 1, bytes: [UInt8](repeating: 7, count: requestSize))
            return .init(
                measure: { try timeCalls(count, on: thread) { _ = try await port.request(request) } },
                stop: {
                    port.invalidate()
                    client.close()
                    thread?.stop()
                    fixture.stop()
                })
        }
    }

    /// A running permanent thread whose loop reads `port`'s replies.
    static func readingThread(for port: SendPort) throws -> PermanentThread {
        let thread = PermanentThread(name: "bench-caller")
        try thread.run()
        guard let loop = thread.loop else { throw BenchmarkError.notMeasurable("the caller's thread has no loop") }
        try port.readReplies(on: loop)
        return thread
    }

    /// `names-call`: the request's bytes on a looked-up port, from a thread blocked on its
    /// own reply.
    static func namesCall(count: Int) -> BenchmarkImpl {
        BenchmarkImpl("names-call") {
            let fixture = try NameFixture(replySize: replySize)
            let client = try NameServerClient.blockingConnect(to: fixture.address)
            let port = try client.blockingLookup(fixture.name)
            let request = Message(id: 1, bytes: [UInt8](repeating: 7, count: requestSize))
            return .init(
                measure: { try PortBenchmarks.medianRequestMicroseconds(count, request, to: port, size: replySize) },
                stop: {
                    port.invalidate()
                    client.close()
                    fixture.stop()
                })
        }
    }

    /// Times `count` awaited calls made one after another by one task (preferring `thread`,
    /// when given); the median and p99.
    static func timeCalls(
        _ count: Int, on thread: PermanentThread? = nil, _ call: @escaping @Sendable () async throws -> Void
    ) throws -> RunSample {
        let done = Handoff<Result<[Double], any Error>>()
        Task(executorPreference: thread) {
            var times: [Double] = []
            times.reserveCapacity(count)
            do {
                for _ in 0..<count {
                    let start = ContinuousClock.now
                    try await call()
                    times.append(start.duration(to: .now).microseconds)
                }
                done.put(.success(times))
            } catch {
                done.put(.failure(error))
            }
        }
        return RunSample(latencies: try done.take(within: .seconds(300), what: "\(count) calls").get())
    }
}

/// The bench's small struct.
struct BenchPoint: Codable, Sendable {
    var x: Int, y: Int
    var label: String
}

/// The bench's actor, on its system's thread.
distributed actor BenchActor {
    typealias ActorSystem = PortActorSystem

    init(actorSystem: PortActorSystem) {
        self.actorSystem = actorSystem
        actorSystem.run(id, on: actorSystem.thread)
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { actorSystem.executor(for: id) }

    distributed func move(_ point: BenchPoint) -> BenchPoint {
        BenchPoint(x: point.x + 1, y: point.y + 1, label: point.label)
    }
}

/// An embedded name server, a system serving a `BenchActor` registered as "bench.actor",
/// and a caller's system.
final class ActorFixture: Sendable {
    let directory: String
    let server: NameServer
    let owner: PortActorSystem
    let caller: PortActorSystem
    let actor: BenchActor

    init() throws {
        var template = Array("/tmp/portkit-bench-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw BenchmarkError.lastSystemError("mkdtemp")
        }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let address = directory + "/names.sock"
        server = try NameServer.start(at: address)
        owner = try PortActorSystem(names: NameServerClient.blockingConnect(to: address))
        caller = try PortActorSystem(names: NameServerClient.blockingConnect(to: address))
        actor = BenchActor(actorSystem: owner)
        try owner.blockingRegister(actor, as: "bench.actor")
    }

    /// The actor as the caller's system resolves it.
    func remote() throws -> BenchActor {
        let done = Handoff<Result<BenchActor, any Error>>()
        Task { [caller] in
            do {
                done.put(.success(try await caller.resolve(name: "bench.actor", as: BenchActor.self)))
            } catch {
                done.put(.failure(error))
            }
        }
        return try done.take(within: .seconds(30), what: "resolving the actor").get()
    }

    func stop() {
        caller.shutDown()
        owner.shutDown()
        server.stop()
        rmdir(directory)
    }
}
