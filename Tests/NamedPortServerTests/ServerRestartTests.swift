import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitLocks

/// Names survive a restart of `portnamed`: the daemon is killed for real (SIGKILL) and
/// started again at the same address, and the clients carry on without restarting.
@Suite("names across a server restart", .serialized)
struct ServerRestartTests {
    /// A `portnamed` in a private directory, killed for real and started again at the same
    /// address; the last one is killed at the end.
    private final class Daemon {
        private let directory = TestDirectory()
        /// The socket path.
        var address: String { directory.address }
        /// The running server.
        private(set) var process: SpawnedProcess!
        var pid: pid_t { process.pid }

        init() throws { try start() }

        /// Starts `portnamed --address ADDRESS options…` and waits until it listens.
        func start(_ options: [String] = []) throws {
            process = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", address] + options)
            #expect(try process.readLine(within: .seconds(60)) == "listening on \(address)")
        }

        /// SIGKILLs it and reaps it: its socket file stays, as after a crash.
        func killForReal() throws {
            process.signal(SIGKILL)
            #expect(try process.wait(within: .seconds(60)) == .signalled(SIGKILL))
        }

        deinit { process?.kill() }
    }

    /// Runs `body` on a thread of its own; its outcome is waited for with `outcome`.
    private func inBackground<T: Sendable>(_ body: @escaping @Sendable () throws -> T) -> ConditionLock<Result<T, any Error>?> {
        let outcome = ConditionLock<Result<T, any Error>?>(nil)
        let thread = Thread {
            let result = Result { try body() }
            outcome.withLock { $0 = result }
            outcome.broadcast()
        }
        thread.start()
        return outcome
    }

    /// A reconnecting client on a loop of its own with `name` registered (its port answers
    /// "in process"), and the states its registration takes from now on.
    private func followedRegistration(
        _ name: String, at address: String
    ) throws -> (PortLoop, NameServerClient, NameRegistration, Locked<[NameRegistrationState]>) {
        let loop = PortLoop()
        let client = try NameServerClient.blockingConnect(to: address, reconnectingOn: loop.loop)
        let registration = try client.blockingRegister(name, port: loop.port { _ in Array("in process".utf8) })
        let states = Locked<[NameRegistrationState]>([])
        registration.onStateChange(on: loop.loop) { state in states.withLock { $0.append(state) } }
        return (loop, client, registration, states)
    }

    @Test func aServedNameComesBackAndWatchersAndWaitingLookupsSeeIt() throws {
        let daemon = try Daemon()
        let address = daemon.address
        let name = "restart.echo"
        let serving = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", address, "serve", name, "--echo"])
        defer { serving.kill() }
        #expect(try serving.readLine(within: .seconds(60)) == "serving \(name)")
        let owner = NameOwner(name: name, pid: serving.pid, uid: getuid())

        // A watcher on a connection of its own, which reconnects on a loop of its own.
        let watcherLoop = PortLoop()
        let watcher = try NameServerClient.blockingConnect(to: address, reconnectingOn: watcherLoop.loop)
        let watch = try watcher.blockingWatch(prefix: "restart.")
        #expect(watch.initialOwners == [owner])

        // The serving process is held still, so that the new server is seen without its name first.
        try serving.stop()
        try daemon.killForReal()
        try daemon.start()
        #expect(try watch.next(timeout: .seconds(60)) == .vanished(owner))

        // A new client's lookup waits for the name.
        let looker = try NameServerClient.blockingConnect(to: address)
        let reply = inBackground { () throws -> String in
            try ask(looker.blockingLookup(name, waitingUpTo: .seconds(120)), "hello again")
        }
        #expect(try waitFor { try looker.status().waitingLookups == 1 })
        serving.signal(SIGCONT)

        // Nothing was reported twice: the name vanished once, and appeared once.
        #expect(try watch.next(timeout: .seconds(60)) == .appeared(owner))
        let answered = reply.wait(until: .now + .seconds(120)) { $0 }
        #expect(try #require(answered).get() == "hello again")
        #expect(try looker.blockingOwner(of: name).pid == serving.pid)
        #expect(try looker.blockingList() == [owner])
        #expect(try watch.next(timeout: .milliseconds(200)) == nil)
        #expect(waitFor { serving.standardError().contains("serving \(name) again (name server pid \(daemon.pid))") })
        #expect(serving.standardError().contains("went away; reconnecting"))
    }

    @Test func aRegistrationReportsServerLostThenRegisteredAgain() throws {
        let daemon = try Daemon()
        let address = daemon.address
        let (loop, client, registration, states) = try followedRegistration("restart.handle", at: address)
        let firstPID = client.serverPID
        #expect(registration.state == .registered)

        // No call is made: the client sees the connection close on its loop.
        try daemon.killForReal()
        #expect(waitFor(.seconds(60)) { states.withLock { $0 } == [.serverLost] })
        #expect(!client.isConnected)
        #expect(throws: NameServerError.serverUnavailable(address: address, reason: "the server went away; reconnecting")) {
            try client.blockingList()
        }

        try daemon.start()
        #expect(waitFor(.seconds(60)) { states.withLock { $0 } == [.serverLost, .registeredAgain] })
        #expect(registration.state == .registeredAgain)
        #expect(client.isConnected)
        #expect(client.serverPID == daemon.pid && client.serverPID != firstPID)
        // The same port, reached from a new client.
        let other = try NameServerClient.blockingConnect(to: address)
        #expect(try ask(other.blockingLookup("restart.handle"), "hi") == "in process")
        #expect(try client.blockingList().map(\.name) == ["restart.handle"])

        client.close()
        #expect(waitFor { states.withLock { $0 } == [.serverLost, .registeredAgain, .released] })
        withExtendedLifetime(loop) {}
    }

    @Test func aNameTakenWhileTheServerIsAwayIsReportedAsTaken() throws {
        let daemon = try Daemon()
        let address = daemon.address
        let (loop, client, registration, states) = try followedRegistration("restart.taken", at: address)

        // The client's loop is held, so that it cannot register again before another process does.
        let held = ConditionLock(false)
        let release = ConditionLock(false)
        try loop.loop.perform {
            held.withLock { $0 = true }
            held.broadcast()
            _ = release.wait(until: .now + .seconds(300)) { $0 ? true : nil }
        }
        #expect(held.wait(until: .now + .seconds(60)) { $0 ? true : nil } == true)
        try daemon.killForReal()
        try daemon.start()
        let taker = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", address, "serve", "restart.taken"])
        defer { taker.kill() }
        #expect(try taker.readLine(within: .seconds(60)) == "serving restart.taken")
        release.withLock { $0 = true }
        release.broadcast()

        #expect(waitFor(.seconds(60)) { states.withLock { $0 } == [.serverLost, .takenByAnother(ownerPID: taker.pid)] })
        #expect(registration.state == .takenByAnother(ownerPID: taker.pid))
        #expect(client.isConnected)
        #expect(try client.blockingOwner(of: "restart.taken").pid == taker.pid)
        // The taken name is no longer this client's: it can be registered again once free.
        taker.kill()
        #expect(waitFor { (try? client.blockingOwner(of: "restart.taken")) == nil })
        let again = try client.blockingRegister("restart.taken", port: loop.port())
        #expect(again.state == .registered)
    }

    @Test func aNameTheNewServerRefusesIsReportedAsFailed() throws {
        let daemon = try Daemon()
        let address = daemon.address
        let (loop, client, first, firstStates) = try followedRegistration("restart.a", at: address)
        let second = try client.blockingRegister("restart.b", port: loop.port())
        let secondStates = Locked<[NameRegistrationState]>([])
        second.onStateChange(on: loop.loop) { state in secondStates.withLock { $0.append(state) } }

        try daemon.killForReal()
        // The new server takes one name per connection: the names are registered again in
        // name order, so the second one is refused.
        try daemon.start(["--max-names", "1"])
        let refused = NameServerError.limitExceeded(what: "names per connection", limit: 1)
        #expect(waitFor(.seconds(60)) { secondStates.withLock { $0 } == [.serverLost, .failed(refused)] })
        #expect(firstStates.withLock { $0 } == [.serverLost, .registeredAgain])
        #expect(first.state == .registeredAgain && second.state == .failed(refused))
        #expect(try client.blockingList().map(\.name) == ["restart.a"])
    }

    @Test func aPortsNamesComeBackOnOneConnection() throws {
        let daemon = try Daemon()
        let address = daemon.address
        let loop = PortLoop()
        let client = try NameServerClient.blockingConnect(to: address, reconnectingOn: loop.loop)
        defer { client.close() }
        let port = try loop.port { _ in Array("shared".utf8) }
        let names = ["restart.x", "restart.y", "restart.z"]
        let registrations = try names.map { try client.blockingRegister($0, port: port) }

        try daemon.killForReal()
        try daemon.start()
        #expect(waitFor(.seconds(60)) { registrations.allSatisfy { $0.state == .registeredAgain } })
        let other = try NameServerClient.blockingConnect(to: address)
        defer { other.close() }
        // Counted before the lookups: a brokered lookup's descriptors may still be open in
        // the server for a moment after its answer (seen on a busy machine), and would be
        // counted as held. They all close, so the count still settles at `held - 2`.
        _ = try other.blockingList()
        let held = try Self.descriptors(of: daemon.pid)
        for name in names { #expect(try ask(other.blockingLookup(name), name) == "shared") }
        // The three names hold one connection into the port (and its hang-up watch): the
        // server closes two descriptors once they are all released, not six.
        for name in names { try client.blockingUnregister(name) }
        #expect(try waitFor { try Self.descriptors(of: daemon.pid) == held - 2 }, "held: \(held)")
    }

    /// How many descriptors process `pid` has open.
    private static func descriptors(of pid: pid_t) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
    }

    @Test func theNamedPortServerExampleKeepsServing() throws {
        let daemon = try Daemon()
        let address = daemon.address
        let example = try SpawnedProcess.spawn(
            SpawnedProcess.product("named-port-server"), ["restart.example", "--address", address])
        defer { example.kill() }
        #expect(try example.readLine(within: .seconds(60)) == "serving restart.example through the name server, pid \(daemon.pid) at \(address)")
        try daemon.killForReal()
        #expect(try example.readLine(within: .seconds(60)) == "restart.example: server lost")
        try daemon.start()
        #expect(try example.readLine(within: .seconds(60)) == "restart.example: registered again")
        let client = try NameServerClient.blockingConnect(to: address)
        #expect(try ask(client.blockingLookup("restart.example"), "again") == "hello, again! (from process \(example.pid))")
    }

    @Test func aResumedWatchReportsOnlyWhatChanged() {
        func owner(_ name: String, _ pid: Int32) -> NameOwner { NameOwner(name: name, pid: pid, uid: 0) }
        let reported = ["a": owner("a", 1), "b": owner("b", 2), "c": owner("c", 3)]
        // a held as before, b gone, c held by another process now, d new.
        let changes = WatchEvents.changes(from: reported, to: [owner("a", 1), owner("c", 4), owner("d", 5)])
        #expect(changes == [.vanished(owner("b", 2)), .vanished(owner("c", 3)), .appeared(owner("c", 4)), .appeared(owner("d", 5))])
        #expect(WatchEvents.changes(from: reported, to: reported.values.sorted { $0.name < $1.name }).isEmpty)
        #expect(WatchEvents.changes(from: [:], to: []).isEmpty)
    }
}
