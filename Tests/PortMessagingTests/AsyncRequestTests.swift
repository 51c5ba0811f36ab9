import Foundation
import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitLocks

/// How a test's send port reaches its receive port.
enum AsyncRoute: String, CaseIterable, CustomTestStringConvertible {
    /// `makeSendPort()`: the message is moved into the port's queue.
    case inProcess
    /// `connect(to:)` a listening port: an unbound connection, whose replies the shared
    /// reply loop reads.
    case socket

    var testDescription: String { rawValue }

    /// A send port to `port` (which is scheduled already) over this route.
    func sendPort(to port: ReceivePort) throws -> SendPort {
        switch self {
        case .inProcess:
            return port.makeSendPort()
        case .socket:
            let address = PortAddress.abstract("portkit-async-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
            try port.listen(at: address)
            return try SendPort.connect(to: address)
        }
    }
}

/// A running permanent thread for a test: its loop serves ports, or it is the executor
/// of the test's tasks (the cooperative pool is too small to count on under load).
func startedThread(_ name: String) throws -> PermanentThread {
    let thread = PermanentThread(name: name)
    try thread.run()
    return thread
}

/// A receive port whose loop is a permanent thread's, and a second permanent thread that
/// runs the test's tasks.
final class AsyncFixture: Sendable {
    let port: ReceivePort
    /// The thread whose loop serves `port`.
    let served: PermanentThread
    let loop: ThreadLoop
    /// The executor of the test's tasks.
    let tasks: PermanentThread
    /// The executor of the test's own body (`run`), which may block it.
    let driver: PermanentThread

    init(capacity: Int = ReceivePort.defaultCapacity) throws {
        port = ReceivePort(capacity: capacity)
        served = try startedThread("async-served")
        loop = try #require(served.loop)
        tasks = try startedThread("async-tasks")
        driver = try startedThread("async-driver")
    }

    /// Runs a test's body on `driver`: its waits (which block) and its resumptions after
    /// each `await` then never depend on the small cooperative pool, which the other tests
    /// running at the same time may hold.
    func run(_ body: () async throws -> Void) async throws {
        try await withTaskExecutorPreference(driver) { try await body() }
    }

    /// Runs `body` as a task on `tasks` and returns what it returns.
    func onTasks<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> T {
        await Task(executorPreference: tasks, operation: body).value
    }

    func stop() {
        port.invalidate()
        served.stop()
        tasks.stop()
        driver.stop()
    }
}

@Suite("Async requests: suspended, not parked")
struct AsyncRequestTests {
    /// A request whose reply is held back 2 s is cancelled once the server has it: the wait
    /// ends with `cancelled` long before the reply; the next request on the same send port
    /// gets its own reply, and so does one made after the late reply was sent.
    @Test(arguments: AsyncRoute.allCases)
    func cancellingARequestEndsItsWaitAtOnceAndItsLateReplyReachesNoOne(route: AsyncRoute) async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        try await fixture.run {
            let received = Recorder<UInt32>()
            let lateSent = TestLatch()
            try fixture.port.schedule(on: fixture.loop, deferringReplies: { message, pending in
                received.append(message.id)
                guard let pending else { return }
                guard message.id == 1 else { return _ = pending.reply(Message(id: message.id, text: "reply \(message.id)")) }
                let timer = LoopTimer(after: .seconds(2)) { _ in
                    pending.reply(Message(id: 1, text: "late"))
                    lateSent.open()
                }
                try? ThreadLoop.current.add(timer, forMode: .common)  // owned thread
            })
            let sendPort = try route.sendPort(to: fixture.port)

            let first = Task(executorPreference: fixture.tasks) { () async -> Result<Message, PortError> in
                await Result { () async throws(PortError) in try await sendPort.request(Message(id: 1), receiveTimeout: .seconds(30)) }
            }
            #expect(eventually { received.all.contains(1) })
            let cancelledAt = ContinuousClock.now
            first.cancel()
            let outcome = await first.value
            let waited = ContinuousClock.now - cancelledAt
            #expect(outcome.error == .cancelled)
            #expect(waited < .milliseconds(1500), "the cancelled wait lasted \(waited)")

            let second = try await Task(executorPreference: fixture.tasks) {
                try await sendPort.request(Message(id: 2), receiveTimeout: .seconds(30))
            }.value
            #expect(second.text == "reply 2")
            #expect(lateSent.wait(timeout: .seconds(30)))
            let third = try await Task(executorPreference: fixture.tasks) {
                try await sendPort.request(Message(id: 3), receiveTimeout: .seconds(30))
            }.value
            #expect(third.text == "reply 3")
            #expect(received.all == [1, 2, 3])
        }
    }

    /// A task cancelled before it asks sends nothing.
    @Test func aTaskCancelledBeforeItAsksSendsNothing() async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        try await fixture.run {
            let received = Recorder<UInt32>()
            try fixture.port.schedule(on: fixture.loop) { message in
                received.append(message.id)
                return Message(id: message.id)
            }
            let sendPort = fixture.port.makeSendPort()
            let started = TestLatch()
            let go = TestLatch()
            let task = Task(executorPreference: fixture.tasks) {
                started.open()
                _ = go.wait(timeout: .seconds(60))
                return await Result { () async throws(PortError) in try await sendPort.request(Message(id: 9)) }
            }
            #expect(started.wait(timeout: .seconds(30)))
            task.cancel()
            go.open()
            #expect(await task.value.error == .cancelled)
            // A request sent after it is the first the port sees.
            _ = try await sendPort.request(Message(id: 10))
            #expect(received.all == [10])
        }
    }

    /// An unanswered async request ends with `receiveTimedOut` at its receive timeout.
    @Test(arguments: AsyncRoute.allCases)
    func anUnansweredRequestTimesOut(route: AsyncRoute) async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        try await fixture.run {
            let kept = Locked<[PendingReply]>([])
            try fixture.port.schedule(on: fixture.loop, deferringReplies: { _, pending in
                if let pending { kept.withLock { $0.append(pending) } }
            })
            let sendPort = try route.sendPort(to: fixture.port)
            let outcome = await Task(executorPreference: fixture.tasks) { () async -> Result<Message, PortError> in
                await Result { () async throws(PortError) in try await sendPort.request(Message(id: 4), receiveTimeout: .milliseconds(200)) }
            }.value
            #expect(outcome.error == .receiveTimedOut)
            #expect(kept.withLock { $0.count } == 1)
        }
    }

    /// A connection's async requests share one deadline timer, armed at the earliest
    /// deadline: a request with a short time-out sent while one with a long time-out waits
    /// still ends at its own deadline, long before the other's; answered requests leave
    /// nothing behind that ends a later one early; the long one ends with its reply.
    @Test func requestsOnOneConnectionEachEndAtTheirOwnDeadline() async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        try await fixture.run {
            let kept = Locked<[PendingReply]>([])
            try fixture.port.schedule(on: fixture.loop, deferringReplies: { message, pending in
                guard let pending else { return }
                // Request 1 is answered at once; the others are kept unanswered.
                if message.id == 1 { pending.reply(Message(id: 1)) } else { kept.withLock { $0.append(pending) } }
            })
            let sendPort = try AsyncRoute.socket.sendPort(to: fixture.port)
            let outcomes = await fixture.onTasks { () async -> (answered: [UInt32], long: Result<Message, PortError>, short: Duration) in
                var answered: [UInt32] = []
                // Answered requests, each with a deadline the timer is armed for.
                for _ in 0..<20 {
                    if let reply = try? await sendPort.request(Message(id: 1), receiveTimeout: .seconds(300)) { answered.append(reply.id) }
                }
                let long = Task(executorPreference: fixture.tasks) { () async -> Result<Message, PortError> in
                    await Result { () async throws(PortError) in try await sendPort.request(Message(id: 2), receiveTimeout: .seconds(300)) }
                }
                let start = ContinuousClock.now
                let short = await Result { () async throws(PortError) in try await sendPort.request(Message(id: 3), receiveTimeout: .milliseconds(200)) }
                let shortTook = start.duration(to: .now)
                #expect(short.error == .receiveTimedOut)
                // The long request is still waiting: answer it now.
                let deadline = ContinuousClock.now + .seconds(30)
                while ContinuousClock.now < deadline, kept.withLock({ $0.count }) < 2 { await Task.yield() }
                for pending in kept.withLock({ $0 }) where pending.requestID == 2 { pending.reply(Message(id: 2)) }
                return (answered, await long.value, shortTook)
            }
            #expect(outcomes.answered == Array(repeating: 1, count: 20))
            #expect((try? outcomes.long.get())?.id == 2)
            #expect(outcomes.short < .seconds(60))
        }
    }

    /// To a child process whose connection its boss port took (a check-in), the boss's
    /// loop reads the replies: a hundred requests waiting at once from one thread's tasks
    /// each get their own echo.
    @Test(arguments: [ChildWorker.Channel.socket, .pipes])
    func requestsToAChildAreAnsweredThroughTheBossPortsLoop(channel: ChildWorker.Channel) async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        let child = try WorkerChild(channel: channel)
        defer { child.finish() }
        try await fixture.run {
            let worker = child.worker
            let echoes = await fixture.onTasks { () async -> [UInt32: [UInt8]] in
                await withTaskGroup(of: (UInt32, [UInt8]).self) { group in
                    for index in 0..<UInt32(100) {
                        group.addTask(executorPreference: fixture.tasks) {
                            let bytes = withUnsafeBytes(of: index) { Array($0) }
                            let reply = try? await worker.request(Message(id: WorkerOp.echo, bytes: bytes), receiveTimeout: .seconds(60))
                            return (index, reply?.bytes ?? [])
                        }
                    }
                    var echoes: [UInt32: [UInt8]] = [:]
                    for await (index, bytes) in group { echoes[index] = bytes }
                    return echoes
                }
            }
            #expect(echoes.count == 100)
            #expect(echoes.allSatisfy { $0.value == withUnsafeBytes(of: $0.key) { Array($0) } })
        }
    }

    /// A thousand requests wait at once from tasks on a single thread, and the server
    /// answers none until it holds all of them: were a wait to park its thread, the second
    /// request would never be sent. Every task gets its own reply.
    @Test(arguments: AsyncRoute.allCases)
    func aThousandConcurrentRequestsFromOneThreadComplete(route: AsyncRoute) async throws {
        let count = 1000
        let fixture = try AsyncFixture(capacity: 2 * count)
        defer { fixture.stop() }
        try await fixture.run {
            let held = Locked<[(UInt32, PendingReply)]>([])
            try fixture.port.schedule(on: fixture.loop, deferringReplies: { message, pending in
                guard let pending else { return }
                let all = held.withLock { held -> [(UInt32, PendingReply)] in
                    held.append((message.id, pending))
                    return held.count == count ? held : []
                }
                for (id, pending) in all { pending.reply(Message(id: id, text: "to \(id)")) }
            })
            let sendPort = try route.sendPort(to: fixture.port)
            let replies = await Task(executorPreference: fixture.tasks) { () async -> [UInt32: String] in
                await withTaskGroup(of: (UInt32, String).self) { group in
                    for id in 0..<UInt32(count) {
                        group.addTask(executorPreference: fixture.tasks) {
                            let reply = try? await sendPort.request(Message(id: id), receiveTimeout: .seconds(120))
                            return (id, reply?.text ?? "none")
                        }
                    }
                    var replies: [UInt32: String] = [:]
                    for await (id, text) in group { replies[id] = text }
                    return replies
                }
            }.value
            #expect(replies.count == count)
            #expect(replies.allSatisfy { $0.value == "to \($0.key)" })
        }
    }
}

extension Result {
    /// The failure, if any.
    var error: Failure? {
        if case .failure(let error) = self { error } else { nil }
    }

    /// The outcome of an async throwing body, with its typed error.
    init(_ body: () async throws(Failure) -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
