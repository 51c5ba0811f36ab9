import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// The async forms of the name client: the same calls suspending their task, cancellation
/// that ends a wait at once, and a watch iterated with `for try await`.
@Suite("Names: the async client")
struct AsyncNameClientTests {
    /// The tasks run on a permanent thread of their own: the cooperative pool may be held
    /// by other tests on a loaded machine.
    private let tasks = PermanentThread(name: "async-names-tasks")

    init() throws { try tasks.run() }

    private func onTasks<T: Sendable>(_ body: @escaping @Sendable () async throws(NameServerError) -> T) async -> Result<T, NameServerError> {
        await Task(executorPreference: tasks) { () async -> Result<T, NameServerError> in await outcome(body) }.value
    }

    @Test func connectRegisterLookupAndListSuspendTheirTask() async throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let ports = PortLoop()
        let port = try ports.port { Array("echo: ".utf8) + $0.bytes }
        let address = directory.address

        let outcome = await onTasks { () async throws(NameServerError) -> (String, [String], Int32) in
            let names = try await NameServerClient.connect(to: address)
            defer { names.close() }
            try await names.register("echo", port: port)
            let echo = try await names.lookup("echo")
            let reply = try? await echo.request(Message(id: 1, text: "hi"), receiveTimeout: .seconds(30))
            let listed = try await names.list().map(\.name)
            let owner = try await names.owner(of: "echo")
            try await names.unregister("echo")
            return (reply?.text ?? "no reply", listed, owner.pid)
        }
        let (reply, listed, pid) = try outcome.get()
        #expect(reply == "echo: hi")
        #expect(listed == ["echo"])
        #expect(pid == getpid())
    }

    @Test func aWaitingLookupSucceedsWhenTheNameComesAndACancelledOneEndsAtOnce() async throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let names = try blockingConnect(directory.address)
        defer { names.close() }

        // Cancelled while it waits for a name no one registers: it ends within a pass.
        // The end is timed inside the task, on its own thread: the test's task may wait for
        // the cooperative pool long after.
        let waiting = Task(executorPreference: tasks) { () async -> (Result<SendPort, NameServerError>, ContinuousClock.Instant) in
            let result = await outcome { () async throws(NameServerError) in try await names.lookup("never", waitingUpTo: .seconds(60)) }
            return (result, ContinuousClock.now)
        }
        #expect(waitFor { (try? names.status().waitingLookups) == 1 })
        let cancelledAt = ContinuousClock.now
        waiting.cancel()
        let (cancelled, endedAt) = await waiting.value
        #expect(cancelled.error == .transport(.cancelled))
        #expect(endedAt - cancelledAt < .seconds(5), "the cancelled lookup took \(endedAt - cancelledAt)")

        // Without a wait (the default, `.zero`) an absent name is not found at once; a
        // lookup that waits for it as long as it takes (`nil`, as a `nil` time-out means
        // everywhere) gets it when it is registered.
        let ports = PortLoop()
        let port = try ports.port { Array("late: ".utf8) + $0.bytes }
        let absent = await outcome { () async throws(NameServerError) in try await names.lookup("late") }
        #expect(absent.error == .notFound(name: "late"))
        let late = Task(executorPreference: tasks) { () async -> Result<SendPort, NameServerError> in
            await outcome { () async throws(NameServerError) in try await names.lookup("late", waitingUpTo: nil) }
        }
        #expect(waitFor { (try? names.status().waitingLookups) ?? 0 >= 1 })
        try blockingRegister(names, "late", port)
        let found = try await late.value.get()
        #expect(try ask(found, "x") == "late: x")
    }

    @Test func aWatchIteratedByATaskSeesTheOwnersThenEachChangeInOrder() async throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let names = try blockingConnect(directory.address)
        defer { names.close() }
        let ports = PortLoop()
        try blockingRegister(names, "db.old", try ports.port())

        let seen = Recorder<String>()
        let watching = Task(executorPreference: tasks) { () async -> Result<[String], NameServerError> in
            await outcome { () async throws(NameServerError) -> [String] in
                let watch = try await names.watch(prefix: "db.")
                seen.append("initial " + watch.initialOwners.map(\.name).joined(separator: ","))
                var events: [String] = []
                for try await event in watch {
                    events.append(event.description.split(separator: " ").prefix(2).joined(separator: " "))
                    seen.append(events.last!)
                    if events.count == 3 { break }
                }
                return events
            }
        }
        #expect(waitFor { seen.all.first == "initial db.old" })
        let other = NameServerClientBox(try blockingConnect(directory.address))
        try blockingRegister(other.client, "db.new", try ports.port())
        try blockingRegister(other.client, "other", try ports.port())
        try blockingUnregister(names, "db.old")
        other.client.close()
        let events = try await watching.value.get()
        #expect(events == ["+ db.new", "- db.old", "- db.new"])
    }

    @Test func aCancelledWatchIterationEndsWithCancelled() async throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let names = try blockingConnect(directory.address)
        defer { names.close() }
        let started = Recorder<Bool>()
        let iterating = Task(executorPreference: tasks) { () async -> Result<Int, NameServerError> in
            await outcome { () async throws(NameServerError) -> Int in
                let watch = try await names.watch(prefix: "")
                started.append(true)
                var count = 0
                for try await _ in watch { count += 1 }
                return count
            }
        }
        #expect(waitFor { started.count == 1 })
        iterating.cancel()
        #expect(await iterating.value.error == .transport(.cancelled))
    }
}

/// A client held where a test needs a reference type.
private final class NameServerClientBox: Sendable {
    let client: NameServerClient
    init(_ client: NameServerClient) { self.client = client }
}

// The blocking forms, for a test's own steps: from a synchronous function the blocking
// overload is the one called.
private func blockingConnect(_ address: String) throws -> NameServerClient { try NameServerClient.blockingConnect(to: address) }
private func blockingRegister(_ names: NameServerClient, _ name: String, _ port: ReceivePort) throws { try names.blockingRegister(name, port: port) }
private func blockingUnregister(_ names: NameServerClient, _ name: String) throws { try names.blockingUnregister(name) }

/// What `body` returned or threw.
private func outcome<T>(_ body: () async throws(NameServerError) -> T) async -> Result<T, NameServerError> {
    do { return .success(try await body()) } catch { return .failure(error) }
}

extension Result {
    /// The failure, if it is one.
    fileprivate var error: Failure? {
        if case .failure(let error) = self { error } else { nil }
    }
}
