import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitSystem
import PortKitLocks

/// Real processes: owners that are SIGKILLed, watchers, 200 clients at once, another
/// user, a second server. The server runs in a child too (the `names-server` scenario),
/// so its descriptors are counted where no other test runs.
@Suite("Names across processes", .serialized)
struct CrossProcessNameTests {
    @Test func twoChildrenFindEachOtherThroughAnEmbeddedServer() throws {
        let directory = TestDirectory()
        // The owner finds no server, so it starts one inside itself.
        let owner = try startOwner(directory.address, "echo", ["--embedded"])
        defer { owner.kill() }
        let requester = try SpawnedProcess.helper("names-request", [directory.address, "echo", "ping", "30"])
        #expect(try requester.readLine() == "reply \(owner.pid) ping")
        #expect(try requester.wait() == .exited(0))
        // And a second requester, for a second brokered connection.
        let again = try SpawnedProcess.helper("names-request", [directory.address, "echo", "pong", "30"])
        #expect(try again.readLine() == "reply \(owner.pid) pong")
        #expect(try again.wait() == .exited(0))
    }

    @Test func aKilledOwnersNameGoesAtOnceAndAWaitingLookupGetsTheNextOwner() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let watcher = try NameServerClient.blockingConnect(to: directory.address)
        let watch = try watcher.blockingWatch(prefix: "victim")
        let uid = UInt32(getuid())

        // SIGKILL → the kernel closes the owner's socket → the server releases the name
        // and tells the watcher. Best of up to three tries against a busy machine.
        var delays: [Duration] = []
        for _ in 0..<3 {
            let owner = try startOwner(directory.address, "victim")
            #expect(try watch.next(timeout: .seconds(30)) == .appeared(NameOwner(name: "victim", pid: owner.pid, uid: uid)))
            let killed = ContinuousClock.now
            owner.signal(SIGKILL)
            let event = try watch.next(timeout: .seconds(30))
            delays.append(ContinuousClock.now - killed)
            #expect(event == .vanished(NameOwner(name: "victim", pid: owner.pid, uid: uid)))
            #expect(try owner.wait() == .signalled(SIGKILL))
            if delays.last! <= .milliseconds(100) { break }
        }
        #expect(delays.min()! <= .milliseconds(100), "SIGKILL to the watcher's '-': \(delays)")
        #expect(try watcher.blockingList().isEmpty)

        // A lookup that waits for the name, in before the next owner registers.
        let user = try NameServerClient.blockingConnect(to: directory.address)
        let found = Locked<Result<SendPort, NameServerError>?>(nil)
        Thread {
            let outcome = Result { () throws(NameServerError) in try user.blockingLookup("victim", waitingUpTo: .seconds(60)) }
            found.withLock { $0 = outcome }
        }.start()
        #expect(try waitFor { try counts(server).contains("waiting=1") })
        #expect(found.withLock { $0 } == nil)
        let next = try startOwner(directory.address, "victim")
        defer { next.kill() }
        #expect(waitFor(.seconds(30)) { found.withLock { $0 } != nil })
        let port = try #require(try found.withLock { $0 }?.get())
        #expect(try ask(port, "again") == "\(next.pid) again")
        port.invalidate()
    }

    @Test func watchPrintsTheExactSequence() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let portname = ChildProcessPaths.portname
        let uid = getuid()
        let watcher = try SpawnedProcess.spawn(portname, ["--address", directory.address, "watch", "w."])
        defer { watcher.kill() }
        #expect(try waitFor { try counts(server).contains("watches=1") })

        let first = try startOwner(directory.address, "w.a")
        #expect(try watcher.readLine() == "+ w.a \(first.pid) \(uid)")
        first.signal(SIGKILL)
        #expect(try watcher.readLine() == "- w.a \(first.pid) \(uid)")
        let second = try startOwner(directory.address, "w.a")
        defer { second.kill() }
        #expect(try watcher.readLine() == "+ w.a \(second.pid) \(uid)")
        let other = try startOwner(directory.address, "x.b")
        defer { other.kill() }

        // A watch started now gets the current owner first.
        let late = try SpawnedProcess.spawn(portname, ["--address", directory.address, "watch"])
        defer { late.kill() }
        #expect(try late.readLine() == "+ w.a \(second.pid) \(uid)")
        #expect(try late.readLine() == "+ x.b \(other.pid) \(uid)")
        second.signal(SIGKILL)
        #expect(try watcher.readLine() == "- w.a \(second.pid) \(uid)")
        #expect(try late.readLine() == "- w.a \(second.pid) \(uid)")
    }

    /// Watches started while one client registers and releases names as fast as it can:
    /// each watch's snapshot is one of the states the names went through, and its events
    /// are exactly the changes after that state, none missing, none twice. The churner
    /// churns until told to stop, which is after every watch has started, so each watch
    /// starts while the names change however slow the machine is.
    @Test func aWatchStartedWhileNamesChangeMissesNothing() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let churner = try SpawnedProcess.helper("names-churn", [directory.address, "c.", "1000000"])
        defer { churner.kill() }
        // "churning" comes once c.0 is registered: a snapshot taken from now on is never
        // the state before the first change, nor (until the stop) the one after the last.
        #expect(try churner.readLine() == "churning")
        var clients: [NameServerClient] = []
        var watches: [NameWatch] = []
        for _ in 0..<16 {
            let client = try NameServerClient.blockingConnect(to: directory.address)
            clients.append(client)
            watches.append(try client.blockingWatch(prefix: "c."))
        }
        churner.send("stop")
        let done = try churner.readLine(within: .seconds(120))
        let count = try #require(done.hasPrefix("done ") ? Int(done.dropFirst(5)) : nil, "churner: \(done)")
        // The changes the churner made: +c.0, then per i ≥ 1: +c.i, -c.(i-1); then -c.last.
        var changes: [(appeared: Bool, index: Int)] = [(true, 0)]
        for index in 1..<max(count, 1) { changes += [(true, index), (false, index - 1)] }
        changes.append((false, count - 1))

        var starts: Set<Int> = []
        for (number, watch) in watches.enumerated() {
            let held = try Set(watch.initialOwners.map { owner in
                #expect(owner.pid == churner.pid)
                return try #require(Int(owner.name.dropFirst(2)))
            })
            // The state a snapshot stands for: {c.k} follows 2k+1 changes, {c.(k-1), c.k} 2k.
            let start: Int
            let sorted = held.sorted()
            if sorted.count == 1 {
                start = 2 * sorted[0] + 1
            } else if sorted.count == 2 && sorted[1] == sorted[0] + 1 {
                start = 2 * sorted[1]
            } else {
                Issue.record("watch \(number): a snapshot the names never were in while churning: \(sorted)")
                continue
            }
            starts.insert(start)
            let seen = try events(watch, changes.count - start)
            #expect(seen == expected(changes[start...]), "watch \(number) from change \(start)")
            #expect(try watch.next(timeout: .milliseconds(20)) == nil, "watch \(number): an event too many")
        }
        // Every watch started after the first change and before the last one.
        #expect(starts.allSatisfy { $0 > 0 && $0 < changes.count }, "starts: \(starts.sorted()), changes: \(changes.count)")
        withExtendedLifetime(clients) {}
    }

    private func events(_ watch: NameWatch, _ count: Int) throws -> [String] {
        var seen: [String] = []
        while seen.count < count, let event = try watch.next(timeout: .seconds(30)) {
            seen.append("\(event.description.prefix(1))\(event.owner.name)")
        }
        return seen
    }

    private func expected(_ changes: ArraySlice<(appeared: Bool, index: Int)>) -> [String] {
        changes.map { "\($0.appeared ? "+" : "-")c.\($0.index)" }
    }

    @Test func twoHundredConcurrentClientsAreAllAccountedFor() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let watcher = try NameServerClient.blockingConnect(to: directory.address)
        let watch = try watcher.blockingWatch(prefix: "stress.")
        let before = try descriptors(server)

        let count = 200
        let stress = try SpawnedProcess.helper("names-stress", [directory.address, "\(count)"])
        defer { stress.kill() }
        #expect(try stress.readLine(within: .seconds(180)) == "registered")
        #expect(try stress.readLine(within: .seconds(180)) == "requested")
        #expect(try stress.readLine(within: .seconds(180)) == "released")
        #expect(try stress.readLine(within: .seconds(60)) == "ok \(count)")
        #expect(try stress.wait(within: .seconds(60)) == .exited(0))

        var appeared: [String: Int] = [:], vanished: [String: Int] = [:]
        var order: [String: [Character]] = [:]
        for _ in 0..<(2 * count) {
            guard let event = try watch.next(timeout: .seconds(30)) else { break }
            #expect(event.owner.pid == stress.pid)
            switch event {
            case .appeared(let owner): appeared[owner.name, default: 0] += 1
            case .vanished(let owner): vanished[owner.name, default: 0] += 1
            }
            order[event.owner.name, default: []].append(event.description.first!)
        }
        let names = Set((0..<count).map { "stress.\($0)" })
        #expect(Set(appeared.keys) == names && appeared.values.allSatisfy { $0 == 1 })
        #expect(Set(vanished.keys) == names && vanished.values.allSatisfy { $0 == 1 })
        #expect(order.values.allSatisfy { $0 == ["+", "-"] })
        #expect(try watch.next(timeout: .milliseconds(20)) == nil)
        #expect(try watcher.blockingList().isEmpty)
        // Every connection, brokered socket and waiter is gone from the server.
        #expect(try waitFor { try counts(server) == "counts connections=1 names=0 waiting=0 watches=1" })
        #expect(try waitFor { try descriptors(server) == before }, "server descriptors before: \(before)")
    }

    @Test func noDescriptorLeaksOnEitherSide() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let warmUp = try SpawnedProcess.helper("names-client-cycles", [directory.address, "--seconds", "0", "--minimum", "1"])
        _ = try warmUp.readLine()
        try warmUp.wait()
        let before = try descriptors(server)
        // Client cycles for a time (StressBudget), each checked by the helper.
        let budget = StressBudget.fromEnvironment()
        let cycles = try SpawnedProcess.helper("names-client-cycles", [directory.address] + budget.arguments)
        let line = try cycles.readLine(within: budget.hangLimit)
        #expect(try cycles.wait() == .exited(0), "client: \(line)")
        var fields: [Substring: Int] = [:]
        for field in line.split(separator: " ") {
            let pair = field.split(separator: "=")
            if pair.count == 2 { fields[pair[0]] = Int(pair[1]) }
        }
        #expect((fields["cycles"] ?? 0) >= budget.minimumCycles, "client: \(line)")
        #expect(fields["before"] != nil && fields["before"] == fields["after"], "client: \(line)")
        #expect(try waitFor { try descriptors(server) == before }, "server descriptors before: \(before)")
    }

    @Test(.enabled(if: canRunAsNobody, "running a child as another user needs root and /usr/bin/setpriv"))
    func aClientOfAnotherUserIsRefused() throws {
        try #require(
            ChildProcessPaths.reachableByEveryone(ChildProcessPaths.helper),
            "the helper must be executable by nobody: every directory above it needs o+x")
        // The socket open to all (0666 in a 0755 directory): the server itself refuses,
        // by the uid SO_PEERCRED gives it, at once (told why, then closed). The refusal
        // answers the hello, which the first call takes: that call and every later one
        // throw it.
        let open = TestDirectory(mode: 0o755)
        let openServer = try startServer(open, open: true)
        defer { openServer.kill() }
        let stranger = try SpawnedProcess.helper("names-try", [open.address, "mine"], asUser: "nobody")
        #expect(
            try stranger.remainingLines()
                == ["connect: ok", "register: permissionDenied", "lookup: permissionDenied", "list: permissionDenied"])
        #expect(try counts(openServer).contains("connections=0 names=0"))

        // The default: socket 0600 in a 0700 directory; another user cannot even connect.
        let closed = TestDirectory()
        let closedServer = try startServer(closed)
        defer { closedServer.kill() }
        let outsider = try SpawnedProcess.helper("names-try", [closed.address, "mine"], asUser: "nobody")
        #expect(try outsider.remainingLines() == ["connect: permissionDenied"])
        let directoryMode = try FileSystem.status(closed.path).permissions
        let socketMode = try FileSystem.status(closed.address).permissions
        #expect(directoryMode == 0o700 && socketMode == 0o600)
    }
}

/// Where the built executables are.
enum ChildProcessPaths {
    static var helper: String { SpawnedProcess.product("portkit-test-helper") }
    static var portname: String { SpawnedProcess.product("portname") }
    static var portnamed: String { SpawnedProcess.product("portnamed") }

    /// Whether every directory above `path` lets others search it, and the file lets them run it.
    static func reachableByEveryone(_ path: String) -> Bool {
        var current = path
        while current != "/" && !current.isEmpty {
            guard let status = try? FileSystem.status(current), status.permissions & 0o001 != 0 else { return false }
            current = NameServerAddress.directory(of: current)
        }
        return true
    }
}
