import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// Standbys: a registration queued behind a name's owner takes the name over when the
/// owner goes, in the order the standbys queued; an owner that allowed it is replaced.
@Suite("Standbys for a name", .serialized)
struct StandbyTests {
    private func serve(_ address: String, _ name: String, _ options: [String]) throws -> SpawnedProcess {
        try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", address, "serve", name] + options)
    }

    @Test func aQueuedStandbyTakesOverInTheSamePassAsTheOwnersSIGKILL() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let names = try NameServerClient.blockingConnect(to: directory.address)
        let watch = try names.blockingWatch(name: "hot")
        let uid = UInt32(getuid())

        let owner = try serve(directory.address, "hot", [])
        defer { owner.kill() }
        #expect(try owner.readLine() == "serving hot")
        let standby = try serve(directory.address, "hot", ["--queue"])
        defer { standby.kill() }
        #expect(try standby.readLine() == "queued for hot")
        #expect(try watch.next(timeout: .seconds(30)) == .appeared(NameOwner(name: "hot", pid: owner.pid, uid: uid)))
        #expect(try names.blockingOwner(of: "hot").pid == owner.pid)

        owner.signal(SIGKILL)
        #expect(try watch.next(timeout: .seconds(30)) == .vanished(NameOwner(name: "hot", pid: owner.pid, uid: uid)))
        // The server gave the name to the standby in the callback that released it: the
        // very next request, no wait asked, finds the standby holding it.
        #expect(try names.blockingOwner(of: "hot").pid == standby.pid)
        #expect(try watch.next(timeout: .seconds(30)) == .appeared(NameOwner(name: "hot", pid: standby.pid, uid: uid)))
        #expect(try standby.readLine() == "serving hot")
        #expect(try owner.wait() == .signalled(SIGKILL))
    }

    @Test func standbysTakeOverInTheOrderTheyQueuedAndADeadOneLeavesTheQueue() async throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let loop = PortLoop()
        let port = try loop.port { _ in Array("\(getpid())".utf8) }
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        #expect(try owner.blockingRegister("line", port: port).state == .registered)

        // The first in the queue is a process that dies while it waits.
        let doomed = try serve(directory.address, "line", ["--queue"])
        #expect(try doomed.readLine() == "queued for line")
        let second = try NameServerClient.blockingConnect(to: directory.address)
        let secondRegistration = try second.blockingRegister("line", port: port, ifTaken: .queue)
        let third = try NameServerClient.blockingConnect(to: directory.address)
        // The third registers with the async form.
        let thirdRegistration = try await third.register("line", port: port, ifTaken: .queue)
        #expect(secondRegistration.state == .queued)
        #expect(thirdRegistration.state == .queued)
        // The owner's status lists the standbys in queue order (all in processes of this
        // test's: the serving child's, then this one's twice).
        let queue = try owner.blockingStatus(of: "line").standbys?.map(\.pid)
        #expect(queue == [doomed.pid, getpid(), getpid()])
        doomed.signal(SIGKILL)
        #expect(try doomed.wait() == .signalled(SIGKILL))
        #expect(try waitFor { try counts(server).contains("connections=3") })
        #expect(try owner.blockingStatus(of: "line").standbys?.count == 2)

        owner.close()
        #expect(waitFor { secondRegistration.state == .registered })
        #expect(thirdRegistration.state == .queued)
        try second.blockingUnregister("line")
        #expect(waitFor { thirdRegistration.state == .registered })
        #expect(try third.blockingList().map(\.name) == ["line"])
        third.close()
        #expect(try waitFor { try counts(server).contains("names=0") })
    }

    @Test func aStandbyRegistersAgainWithItsTermsAfterAServerRestart() throws {
        let directory = TestDirectory()
        var server = try startServer(directory)
        defer { server.kill() }
        let loop = PortLoop()
        let port = try loop.port { _ in Array("\(getpid())".utf8) }
        let owner = try NameServerClient.blockingConnect(to: directory.address, reconnectingOn: loop.loop)
        let held = try owner.blockingRegister("again", port: port)
        let standby = try NameServerClient.blockingConnect(to: directory.address, reconnectingOn: loop.loop)
        let queued = try standby.blockingRegister("again", port: port, ifTaken: .queue)
        #expect(queued.state == .queued)

        server.signal(SIGKILL)
        #expect(try server.wait() == .signalled(SIGKILL))
        server = try startServer(directory)
        // Each client registers again with its terms: whichever comes first holds the name,
        // the other waits behind it (the standby queued, the owner refused as before).
        #expect(waitFor { queued.state == .registeredAgain || (queued.state == .queued && held.state == .registeredAgain) })
        if queued.state == .registeredAgain {
            #expect(waitFor { held.state == .takenByAnother(ownerPID: getpid()) })
        } else {
            owner.close()
            #expect(waitFor { queued.state == .registered })
        }
        #expect(try standby.blockingOwner(of: "again").pid == getpid())
        standby.close()
    }

    @Test func replaceTakesTheNameOnlyFromAnOwnerThatAllowedIt() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let loop = PortLoop()
        let port = try loop.port { _ in Array("\(getpid())".utf8) }
        let names = try NameServerClient.blockingConnect(to: directory.address)

        let fixed = try serve(directory.address, "fixed", [])
        defer { fixed.kill() }
        #expect(try fixed.readLine() == "serving fixed")
        #expect(throws: NameServerError.nameTaken(name: "fixed", ownerPID: fixed.pid)) {
            try names.blockingRegister("fixed", port: port, ifTaken: .replace)
        }

        let loose = try serve(directory.address, "loose", ["--replaceable"])
        defer { loose.kill() }
        #expect(try loose.readLine() == "serving loose")
        let watch = try names.blockingWatch(name: "loose")
        let replaced = try names.blockingRegister("loose", port: port, ifTaken: .replace)
        #expect(replaced.state == .registered)
        let uid = UInt32(getuid())
        #expect(watch.initialOwners == [NameOwner(name: "loose", pid: loose.pid, uid: uid)])
        #expect(try watch.next(timeout: .seconds(30)) == .vanished(NameOwner(name: "loose", pid: loose.pid, uid: uid)))
        #expect(try watch.next(timeout: .seconds(30)) == .appeared(NameOwner(name: "loose", pid: getpid(), uid: uid)))
        // The replaced owner is told, and `portname serve` exits 1 saying by whom.
        #expect(try loose.wait() == .exited(1))
        #expect(loose.standardError().contains("'loose' was taken by process \(getpid())"))
        let reply = try names.blockingLookup("loose").blockingRequest(Message(id: 1, text: "who"), receiveTimeout: .seconds(30))
        #expect(reply.text == "\(getpid())")
    }
}
