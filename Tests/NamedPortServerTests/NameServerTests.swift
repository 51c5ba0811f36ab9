import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitSystem
import PortKitLocks

/// The server and its clients in this process: the protocol's answers, ownership,
/// waiting, watching, limits and the policy. (Real processes: CrossProcessNameTests.)
@Suite("NameServer in-process")
struct NameServerTests {
    @Test func registerLookUpAndRequest() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let loop = PortLoop()
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        let user = try NameServerClient.blockingConnect(to: directory.address)
        #expect(owner.serverPID == getpid())

        let receiver = try loop.port { Array("db: \($0.text)".utf8) }
        try owner.blockingRegister("db", port: receiver)
        let port = try user.blockingLookup("db")
        #expect(try ask(port, "select 1") == "db: select 1")
        #expect(try ask(port, "select 2") == "db: select 2")
        // Every lookup is a connection of its own.
        let second = try user.blockingLookup("db")
        #expect(try ask(second, "again") == "db: again")
        #expect(try user.blockingOwner(of: "db") == NameOwner(name: "db", pid: getpid(), uid: UInt32(getuid())))
        port.invalidate()
        second.invalidate()
        receiver.invalidate()
    }

    @Test func ownershipIsTheConnections() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let first = try NameServerClient.blockingConnect(to: directory.address)
        let second = try NameServerClient.blockingConnect(to: directory.address)
        try first.blockingRegister("svc", port: ReceivePort())

        #expect(throws: NameServerError.nameTaken(name: "svc", ownerPID: getpid())) {
            try second.blockingRegister("svc", port: ReceivePort())
        }
        #expect(throws: NameServerError.notOwner(name: "svc", ownerPID: getpid())) { try second.blockingUnregister("svc") }
        #expect(throws: NameServerError.notFound(name: "nothing")) { try second.blockingUnregister("nothing") }
        #expect(throws: NameServerError.nameTaken(name: "svc", ownerPID: getpid())) {
            try first.blockingRegister("svc", port: ReceivePort())
        }
        #expect(try second.blockingList().map(\.name) == ["svc"])

        // Closing the owner's connection releases the name at once.
        first.close()
        #expect(throws: NameServerError.connectionLost(address: directory.address)) { try first.blockingList() }
        #expect(try waitFor { try second.blockingList().isEmpty })
        try second.blockingRegister("svc", port: ReceivePort())
        try second.blockingUnregister("svc")
        #expect(try second.blockingList().isEmpty)
    }

    @Test func namesAreCheckedOnBothSides() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        #expect(throws: NameServerError.invalidName(name: "", reason: .empty)) { try client.blockingRegister("", port: ReceivePort()) }
        #expect(throws: NameServerError.invalidName(name: "a/b", reason: .slash)) { try client.blockingLookup("a/b") }

        // A client that skips the checks gets them from the server.
        let raw = try RawNameClient(address: directory.address)
        defer { raw.close() }
        #expect(try raw.hello())
        for (bytes, reason) in [
            ([UInt8](), NameServerError.InvalidNameReason.empty),
            (Array("x/y".utf8), .slash),
            ([0x41, 0x0A], .controlCharacter),
            ([UInt8](repeating: 0x61, count: 256), .tooLong(bytes: 256)),
            ([0xC3, 0x28], .notUTF8),
        ] {
            let reply = try raw.request(.register, [.data(bytes), .port(ReceivePort().makeSendPort())])
            #expect(NameReply.decode(status: reply.id, reply.components, address: directory.address)
                == .invalidName(name: String(decoding: bytes, as: UTF8.self), reason: reason))
        }
        // An unknown operation is refused, and the connection stays usable.
        #expect(try raw.request(rawOperation: 77, []).id == NameStatus.badRequest.rawValue)
        #expect(try raw.request(.list, []).id == NameStatus.ok.rawValue)
    }

    @Test func aLookupWaitsForItsNameAndTimesOut() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let loop = PortLoop()
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        let user = try NameServerClient.blockingConnect(to: directory.address)

        let started = ContinuousClock.now
        #expect(throws: NameServerError.waitTimedOut(operation: "waiting for 'late'")) {
            try user.blockingLookup("late", waitingUpTo: .milliseconds(200))
        }
        #expect(ContinuousClock.now - started >= .milliseconds(200))

        let found = Locked<Result<SendPort, NameServerError>?>(nil)
        let waiter = Thread {
            let outcome = Result { () throws(NameServerError) in try user.blockingLookup("late", waitingUpTo: .seconds(60)) }
            found.withLock { $0 = outcome }
        }
        waiter.start()
        #expect(try waitFor { try server.counts().waitingLookups == 1 })
        #expect(found.withLock { $0 } == nil)
        let receiver = try loop.port { Array("late: \($0.text)".utf8) }
        try owner.blockingRegister("late", port: receiver)
        #expect(waitFor { found.withLock { $0 } != nil })
        let port = try #require(try found.withLock { $0 }?.get())
        #expect(try ask(port, "hi") == "late: hi")
        port.invalidate()
        receiver.invalidate()
    }

    @Test func aWatchSeesCurrentOwnersThenEveryChangeInOrder() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        let watcher = try NameServerClient.blockingConnect(to: directory.address)
        let me = (getpid(), UInt32(getuid()))
        try owner.blockingRegister("w.b", port: ReceivePort())
        try owner.blockingRegister("w.a", port: ReceivePort())
        try owner.blockingRegister("other", port: ReceivePort())

        let watch = try watcher.blockingWatch(prefix: "w.")
        #expect(watch.initialOwners.map(\.name) == ["w.a", "w.b"])
        try owner.blockingRegister("w.c", port: ReceivePort())
        try owner.blockingRegister("x", port: ReceivePort())
        try owner.blockingUnregister("w.a")
        owner.close()

        var events: [NameEvent] = []
        while events.count < 3, let event = try watch.next(timeout: .seconds(20)) { events.append(event) }
        #expect(events == [
            .appeared(NameOwner(name: "w.c", pid: me.0, uid: me.1)),
            .vanished(NameOwner(name: "w.a", pid: me.0, uid: me.1)),
            // The owner's other names go when its connection does, in name order.
            .vanished(NameOwner(name: "w.b", pid: me.0, uid: me.1)),
        ])
        #expect(try watch.next(timeout: .milliseconds(1)) == .vanished(NameOwner(name: "w.c", pid: me.0, uid: me.1)))
        #expect(try watch.next(timeout: .milliseconds(50)) == nil)

        watch.cancel()
        #expect(try watch.next(timeout: .seconds(1)) == nil)
        let all = try watcher.blockingWatch()
        #expect(all.initialOwners.isEmpty)
    }

    @Test func aWatchOnANameSeesOnlyThatName() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        let watcher = try NameServerClient.blockingConnect(to: directory.address)
        try owner.blockingRegister("db2", port: ReceivePort())
        let watch = try watcher.blockingWatch(name: "db")
        #expect(watch.isExact && watch.initialOwners.isEmpty)
        try owner.blockingRegister("db.replica", port: ReceivePort())
        try owner.blockingRegister("db", port: ReceivePort())
        try owner.blockingUnregister("db")
        let me = NameOwner(name: "db", pid: getpid(), uid: UInt32(getuid()))
        #expect(try watch.next(timeout: .seconds(20)) == .appeared(me))
        #expect(try watch.next(timeout: .seconds(20)) == .vanished(me))
        #expect(try watch.next(timeout: .milliseconds(50)) == nil)
        #expect(throws: NameServerError.invalidName(name: "", reason: .empty)) { try watcher.blockingWatch(name: "") }
    }

    /// A request carries what its operation takes and nothing else: one with descriptors
    /// (1, or 8) is refused, the server keeps none of them, and the connection stays.
    @Test(arguments: [1, 8]) func aRequestCarryingDescriptorsIsRefusedAndKeepsNone(count: Int) throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        var ends: [CInt] = [-1, -1]
        try #require(pipe(&ends) == 0)
        let pipeReader = FileDescriptor(rawValue: ends[0])
        defer { try? pipeReader.close() }
        let raw = try RawNameClient(address: directory.address)
        defer { raw.close() }
        #expect(try raw.hello())
        let fields = [NameField.string("x"), NameField.integer(UInt64(0))] + (0..<count).map { _ in MessageComponent.descriptor(ends[1]) }
        let reply = try raw.request(.owner, fields)
        #expect(reply.id == NameStatus.badRequest.rawValue)
        close(ends[1])
        // Every copy of the pipe's write end is closed: its reader sees the end.
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(try pipeReader.poll(CShort(POLLIN), timeout: .seconds(20)) != 0)
        #expect(buffer.withUnsafeMutableBytes { read(ends[0], $0.baseAddress, $0.count) } == 0)
        #expect(try raw.request(.list, []).id == NameStatus.ok.rawValue)
    }

    /// A client of an older protocol is refused with a clear error, not served: the reply
    /// to its hello names both versions.
    @Test func anOlderClientIsRefusedWithItsVersionNamed() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let old = try RawNameClient(address: directory.address)
        defer { old.close() }
        let reply = try old.request(.hello, [NameField.integer(UInt64(3))])
        #expect(reply.id == NameStatus.badRequest.rawValue)
        var fields = NameFieldReader(reply.components)
        #expect(try fields.string() == "protocol version 3 asked, this server speaks 4 only")
        // Nothing but a hello is served before one is accepted.
        #expect(try old.request(.list, []).id == NameStatus.badRequest.rawValue)
        #expect(try old.hello())
        #expect(try old.request(.list, []).id == NameStatus.ok.rawValue)
    }

    @Test func perConnectionLimitsAreEnforced() throws {
        let directory = TestDirectory()
        let policy = NameServerPolicy(maxNamesPerConnection: 2, maxWatchesPerConnection: 1, maxWaitingLookupsPerConnection: 1)
        let server = try NameServer.start(at: directory.address, policy: policy)
        defer { server.stop() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        try client.blockingRegister("a", port: ReceivePort())
        try client.blockingRegister("b", port: ReceivePort())
        #expect(throws: NameServerError.limitExceeded(what: "names per connection", limit: 2)) {
            try client.blockingRegister("c", port: ReceivePort())
        }
        let watch = try client.blockingWatch(prefix: "a")
        #expect(throws: NameServerError.limitExceeded(what: "watches per connection", limit: 1)) {
            _ = try client.blockingWatch(prefix: "b")
        }
        watch.cancel()
        // The server sees the cancelled watch's port close; the next watch may race that.
        #expect(waitFor { (try? client.blockingWatch(prefix: "b")) != nil })
        let other = try NameServerClient.blockingConnect(to: directory.address)
        try other.blockingRegister("c", port: ReceivePort())
    }

    /// A user the policy refuses is told so at once and closed: its first call (which
    /// takes the hello's answer) fails with `permissionDenied`, and the server keeps no
    /// connection for it.
    @Test func usersOutsideThePolicyAreRefused() throws {
        let directory = TestDirectory()
        // Nobody is allowed: this process's own uid is refused like a stranger's.
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(allowedUsers: []))
        defer { server.stop() }
        for _ in 0..<3 {
            do {
                _ = try NameServerClient.blockingConnect(to: directory.address).blockingList()
                Issue.record("a refused user was served")
            } catch {
                guard case .permissionDenied(let reason) = error else {
                    Issue.record("connect: \(error)")
                    continue
                }
                #expect(reason.contains("uid \(getuid())"), "\(reason)")
            }
        }
        #expect(try server.counts().connections == 0)
    }

    /// A client that reconnects waits for its hello's answer in `connect`: a refusal is
    /// thrown there (blocking and async alike), not taken for a server that went away.
    @Test func aReconnectingClientIsRefusedAtConnect() async throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(allowedUsers: []))
        defer { server.stop() }
        let loop = PortLoop()
        func connectBlocking() throws(NameServerError) {
            _ = try NameServerClient.blockingConnect(to: directory.address, reconnectingOn: loop.loop)
        }
        do {
            try connectBlocking()
            Issue.record("a refused user connected")
        } catch {
            guard case .permissionDenied = error else {
                Issue.record("connect: \(error)")
                return
            }
        }
        do {
            _ = try await NameServerClient.connect(to: directory.address, reconnectingOn: loop.loop)
            Issue.record("a refused user connected")
        } catch {
            guard case .permissionDenied = error else {
                Issue.record("async connect: \(error)")
                return
            }
        }
        #expect(try server.counts().connections == 0)
    }

    @Test func startingOverALiveServerFailsAndOverAStaleSocketSucceeds() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        #expect(throws: NameServerError.serverAlreadyRunning(address: directory.address)) {
            try NameServer.start(at: directory.address)
        }
        server.stop()
        #expect(!FileManager.default.fileExists(atPath: directory.address))

        // A socket file nobody listens on (a crashed server's), without its lock file.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try UnixSocket.bind(FileDescriptor(rawValue: stale), to: directory.address)
        close(stale)
        #expect(FileManager.default.fileExists(atPath: directory.address))
        let replacement = try NameServer.start(at: directory.address)
        let client = try NameServerClient.blockingConnect(to: directory.address)
        #expect(try client.blockingList().isEmpty)
        replacement.stop()
        #expect(throws: NameServerError.connectionLost(address: directory.address)) { try client.blockingList() }

        // A file that is not a socket is not ours to remove.
        _ = FileManager.default.createFile(atPath: directory.address, contents: Data("keep".utf8))
        #expect(throws: NameServerError.self) { try NameServer.start(at: directory.address) }
        #expect(FileManager.default.contents(atPath: directory.address) == Data("keep".utf8))
    }

    @Test func theServerMakesAPrivateDirectoryAndSocket() throws {
        let directory = TestDirectory()
        let address = directory.path + "/made/names.sock"
        let server = try NameServer.start(at: address)
        defer { server.stop() }
        let made = try FileSystem.status(directory.path + "/made")
        #expect(made.isDirectory && made.permissions == 0o700)
        let socketFile = try FileSystem.status(address)
        #expect(socketFile.isSocket && socketFile.permissions == 0o600)
    }

    /// A connect that may wait finds a server that starts later, even in a directory that
    /// does not exist yet; without a server it gives up at its deadline.
    @Test func aConnectWaitsForItsServerToAppear() throws {
        let directory = TestDirectory()
        let address = directory.path + "/later/names.sock"
        #expect(throws: NameServerError.self) { try NameServerClient.blockingConnect(to: address) }
        #expect(throws: NameServerError.serverUnavailable(address: address, reason: "no socket file")) {
            try NameServerClient.blockingConnect(to: address, waitingForServer: .milliseconds(300))
        }
        let outcome = ConditionLock<Result<Int32, NameServerError>?>(nil)
        let started = ConditionLock(false)
        Thread {
            started.withLock { $0 = true }
            started.broadcast()
            let result = Result { () throws(NameServerError) -> Int32 in
                let client = try NameServerClient.blockingConnect(to: address, waitingForServer: .seconds(120))
                defer { client.close() }
                _ = try client.blockingList()
                return client.serverPID
            }
            outcome.withLock { $0 = result }
            outcome.broadcast()
        }.start()
        #expect(started.wait(until: .now + .seconds(60)) { $0 ? true : nil } == true)
        let server = try NameServer.start(at: address)
        defer { server.stop() }
        let result = try #require(outcome.wait(until: .now + .seconds(120)) { $0 })
        #expect(try result.get() == getpid())
    }

    @Test func connectingWhereNoServerIsSaysSo() throws {
        let directory = TestDirectory()
        #expect(throws: NameServerError.serverUnavailable(address: directory.address, reason: "no socket file")) {
            try NameServerClient.blockingConnect(to: directory.address)
        }
        // On demand: the first client starts an embedded server, and the next finds it.
        let client = try NameServerClient.blockingConnect(to: directory.address, startingServerIfNeeded: true)
        #expect(client.serverPID == getpid())
        let embedded = try NameServer.embedded(at: directory.address)
        #expect(embedded.address == directory.address)
        let other = try NameServerClient.blockingConnect(to: directory.address, startingServerIfNeeded: true)
        try client.blockingRegister("here", port: ReceivePort())
        #expect(try other.blockingList().map(\.name) == ["here"])
        embedded.stop()
    }

    @Test func manyClientsInOneProcessShareTheWork() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let loop = PortLoop()
        let count = 32
        let failures = Locked<[String]>([])
        let phases = ConditionLock([0, 0])
        @Sendable func arrive(_ phase: Int) {
            phases.withLock { $0[phase] += 1 }
            phases.broadcast()
            _ = phases.wait(until: .now + .seconds(120)) { $0[phase] >= count ? true : nil }
        }
        let finished = ConditionLock(0)
        for index in 0..<count {
            Thread {
                defer {
                    finished.withLock { $0 += 1 }
                    finished.broadcast()
                }
                do {
                    let client = try NameServerClient.blockingConnect(to: directory.address)
                    let receiver = try loop.port { _ in Array("\(index)".utf8) }
                    try client.blockingRegister("p.\(index)", port: receiver)
                    arrive(0)
                    let port = try client.blockingLookup("p.\((index + 1) % count)")
                    let answer = try ask(port, "?")
                    if answer != "\((index + 1) % count)" { failures.withLock { $0.append("\(index) got \(answer)") } }
                    port.invalidate()
                    arrive(1)
                    client.close()
                } catch {
                    failures.withLock { $0.append("\(index): \(error)") }
                    arrive(0)
                    arrive(1)
                }
            }.start()
        }
        #expect(finished.wait(until: .now + .seconds(120)) { $0 == count ? true : nil } == true)
        #expect(failures.withLock { $0 } == [])
        #expect(waitFor { (try? server.counts()) == NameServerCounts(connections: 0, names: 0, waitingLookups: 0, watches: 0) })
    }
}
