import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// Monitors with real processes: the server, the owners and the lookers are children; the
/// monitor is this process's. A tapped connection carries what a direct one does.
@Suite("Name monitors", .serialized)
struct NameMonitorTests {
    /// The events of `monitor` until those seen satisfy `done`, or `nil` after 30 s.
    private func events(
        of monitor: NameMonitor, until done: ([MonitoredMessage]) -> Bool
    ) async throws -> [MonitoredMessage]? {
        // A watchdog, not a synchronisation: it only ends an iteration that would hang.
        let watchdog = Task {
            try await Task.sleep(for: .seconds(30))
            monitor.cancel()
        }
        defer { watchdog.cancel() }
        var seen: [MonitoredMessage] = []
        for try await event in monitor {
            seen.append(event)
            if done(seen) { return seen }
        }
        return nil
    }

    @Test func aMonitorSeesARequestAndItsReplyWithTheirSendersAndCorrelation() async throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try startOwner(directory.address, "mon.echo")
        defer { owner.kill() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        defer { client.close() }
        let monitor = try await client.monitor(["mon.*"])
        #expect(monitor.initialOwners.map(\.name) == ["mon.echo"])

        let requester = try SpawnedProcess.helper("names-request", [directory.address, "mon.echo", "ping", "30"])
        #expect(try requester.readLine() == "reply \(owner.pid) ping")
        #expect(try requester.wait() == .exited(0))

        let seen = try #require(try await events(of: monitor) { $0.last?.kind == .closed })
        #expect(seen.map(\.kind) == [.opened, .request, .reply, .closed])
        #expect(Set(seen.map(\.connection)).count == 1)
        #expect(seen.allSatisfy { $0.name == "mon.echo" })
        let (opened, request, reply) = (seen[0], seen[1], seen[2])
        #expect(opened.sender?.pid == requester.pid)
        #expect(request.direction == .toName && request.id == 7 && request.correlation == 1)
        #expect(request.sender?.pid == requester.pid && request.sender?.uid == getuid())
        #expect(request.components == [.bytes(count: 4)])
        #expect(reply.direction == .fromName && reply.id == 7 && reply.correlation == 1)
        #expect(reply.sender?.pid == owner.pid)
        #expect(reply.byteCount == "\(owner.pid) ping".utf8.count)
        #expect(request.time <= reply.time)
    }

    @Test func aTapPassesBytesAndDescriptorsOnAndClosesBothSidesWhenEitherGoes() async throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try SpawnedProcess.helper("names-echo", [directory.address, "mon.fd"])
        defer { owner.kill() }
        #expect(try owner.readLine() == "serving mon.fd \(owner.pid)")
        let client = try NameServerClient.blockingConnect(to: directory.address)
        defer { client.close() }
        let monitor = try await client.monitor(["mon.fd"])

        // Every byte value, past one socket buffer, and a file the owner reads through the
        // descriptor the message carries, then sends back.
        let payload = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
        let path = directory.path + "/data"
        try Data("through the tap".utf8).write(to: URL(fileURLWithPath: path))
        let file = open(path, O_RDONLY | O_CLOEXEC)
        defer { close(file) }
        let port = try client.blockingLookup("mon.fd")
        let reply = try port.blockingRequest(
            Message(id: 42, components: [.data(payload), .descriptor(file)]),
            sendTimeout: .seconds(30), receiveTimeout: .seconds(30))
        defer { for fd in reply.descriptors { close(fd) } }
        #expect(reply.id == 42)
        #expect(reply.bytes == payload + Array("through the tap".utf8))
        #expect(reply.descriptors.count == 1)
        var back = [UInt8](repeating: 0, count: 64)
        let count = back.withUnsafeMutableBytes { pread(reply.descriptors[0], $0.baseAddress, $0.count, 0) }
        #expect(count == 15 && Array(back[..<15]) == Array("through the tap".utf8))
        try port.send(Message(id: 5, bytes: [1, 2, 3]), timeout: .seconds(30))
        #expect(try owner.readLine() == "message 5 3")

        // The looker closes: the tap closes the owner's side.
        let second = try client.blockingLookup("mon.fd")
        second.invalidate()
        // The owner dies: the tap closes the looker's side.
        owner.signal(SIGKILL)
        let seen = try #require(try await events(of: monitor) { $0.filter { $0.kind == .closed }.count == 2 })
        let first = seen.filter { $0.connection == 1 }
        #expect(first.map(\.kind) == [.opened, .request, .reply, .message, .closed])
        #expect(first[1].components == [.bytes(count: 70_000), .descriptor])
        #expect(first[2].components == [.bytes(count: 70_015), .descriptor])
        #expect(first[3].components == [.bytes(count: 3)] && first[3].id == 5 && first[3].correlation == 0)
        #expect(seen.filter { $0.connection == 2 }.map(\.kind) == [.opened, .closed])
        #expect(throws: PortError.self) {
            try port.blockingRequest(Message(id: 1, bytes: [0]), sendTimeout: .seconds(5), receiveTimeout: .seconds(5))
        }
    }

    @Test func aMonitorEndsWithConnectionLostWhenTheServerGoes() async throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        let client = try NameServerClient.blockingConnect(to: directory.address)
        defer { client.close() }
        let monitor = try await client.monitor(["*"])
        #expect(monitor.initialOwners.isEmpty)
        server.signal(SIGKILL)
        #expect(try server.wait() == .signalled(SIGKILL))
        await #expect(throws: NameServerError.connectionLost(address: directory.address)) {
            _ = try await events(of: monitor) { _ in false }
        }
    }

    @Test(arguments: [
        (uid: UInt32(1000), owner: UInt32(1000), allowed: true),
        (uid: 0, owner: 1000, allowed: true),
        (uid: 1001, owner: 1000, allowed: false),
        (uid: 1000, owner: 0, allowed: false),
    ])
    func onlyTheOwnersUserAndRootMayMonitor(_ check: (uid: UInt32, owner: UInt32, allowed: Bool)) {
        #expect(NameServerPolicy.mayMonitor(uid: check.uid, ownerUID: check.owner) == check.allowed)
    }

    @Test(.enabled(if: canRunAsNobody, "running a child as another user needs root and /usr/bin/setpriv"))
    func anotherUsersMonitorIsRefusedAndRootsIsNot() async throws {
        try #require(ChildProcessPaths.reachableByEveryone(ChildProcessPaths.portname))
        let directory = TestDirectory(mode: 0o755)
        let server = try SpawnedProcess.helper("names-server", [directory.address, "--open", "--allow-all"])
        defer { server.kill() }
        #expect(try server.readLine() == "listening on \(directory.address)")
        let rootsOwner = try startOwner(directory.address, "mine")
        defer { rootsOwner.kill() }
        let stranger = try SpawnedProcess.spawn(
            ChildProcessPaths.portname, ["--address", directory.address, "monitor", "mine"], asUser: "nobody")
        #expect(try stranger.wait() == .exited(1))
        #expect(stranger.standardError().contains("may not monitor 'mine', owned by uid 0"))

        let nobodysOwner = try SpawnedProcess.helper("names-owner", [directory.address, "theirs"], asUser: "nobody")
        defer { nobodysOwner.kill() }
        #expect(try nobodysOwner.readLine() == "serving theirs \(nobodysOwner.pid)")
        let client = try NameServerClient.blockingConnect(to: directory.address)
        defer { client.close() }
        let monitor = try await client.monitor(["theirs"])
        #expect(monitor.initialOwners.map(\.name) == ["theirs"])
    }

    @Test func theStatusOfANameSaysWhoItsOwnerIs() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try startOwner(directory.address, "st.owner")
        defer { owner.kill() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        defer { client.close() }
        let status = try client.blockingStatus(of: "st.owner")
        #expect(status.owner == NameOwner(name: "st.owner", pid: owner.pid, uid: getuid()))
        #expect(status.gid == getgid())
        let helper = URL(fileURLWithPath: ChildProcessPaths.helper).resolvingSymlinksInPath().path
        #expect(status.executable == helper)
        #expect(status.controlGroup?.hasPrefix("/") == true)
        #expect(status.isActivatable == false && status.standbys == [])
        #expect(throws: NameServerError.notFound(name: "st.none")) { try client.blockingStatus(of: "st.none") }
    }

    @Test(arguments: [
        ("/system.slice/db.service", "db.service"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/web.service", "web.service"),
        ("/user.slice/user-1000.slice/session-2.scope", nil),
        ("/", nil),
    ])
    func theSystemdUnitIsTheCgroupsLastService(_ group: String, _ unit: String?) {
        let status = NameOwnerStatus(owner: NameOwner(name: "n", pid: 1, uid: 0), gid: 0, controlGroup: group)
        #expect(status.systemdUnit == unit)
    }
}
