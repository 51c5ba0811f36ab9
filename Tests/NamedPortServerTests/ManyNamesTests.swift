import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitLocks

/// `list` and a watch's snapshot carry any number of names in one reply (owners are packed
/// into one field), and the events after a snapshot come complete and in order.
@Suite("Names: many names in one reply", .serialized)
struct ManyNamesTests {
    /// 3,000 names, served by a server in a child: `list`, a watch's snapshot, `portname
    /// list`, and the events after the snapshot, all complete and in order.
    @Test func thousandsOfNamesListAndWatch() throws {
        let count = 3_000
        let directory = TestDirectory()
        let server = try SpawnedProcess.helper("names-server", [directory.address, "--max-names", "\(count + 10)"])
        defer { server.kill() }
        #expect(try server.readLine() == "listening on \(directory.address)")
        // One port for every name, which the names after the first name the first by.
        let owner = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(60))
        let port = ReceivePort()
        defer { port.invalidate() }
        for index in 0..<count { try owner.blockingRegister("bulk.\(index)", port: port) }
        let me = (pid: getpid(), uid: UInt32(getuid()))
        let expected = (0..<count).map { NameOwner(name: "bulk.\($0)", pid: me.pid, uid: me.uid) }.sorted { $0.name < $1.name }

        let client = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(60))
        #expect(try client.blockingList() == expected)
        let all = try client.blockingWatch(prefix: "bulk.")
        #expect(all.initialOwners == expected)
        let some = try client.blockingWatch(prefix: "bulk.99")
        #expect(some.initialOwners == expected.filter { $0.name.hasPrefix("bulk.99") })
        #expect(some.initialOwners.count == 11)

        let list = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", directory.address, "list"])
        let lines = try list.remainingLines(within: .seconds(60))
        #expect(try list.wait(within: .seconds(60)) == .exited(0))
        #expect(lines == expected.map(\.description))

        // The events come after the snapshot: one more name, then the owner's connection
        // ends and its 3,000 go, in name order.
        let extra = try NameServerClient.blockingConnect(to: directory.address)
        try extra.blockingRegister("bulk.extra", port: ReceivePort())
        #expect(try all.next(timeout: .seconds(30)) == .appeared(NameOwner(name: "bulk.extra", pid: me.pid, uid: me.uid)))
        owner.close()
        var vanished: [NameOwner] = []
        while vanished.count < count, let event = try all.next(timeout: .seconds(60)) {
            guard case .vanished(let gone) = event else {
                Issue.record("unexpected \(event)")
                break
            }
            vanished.append(gone)
        }
        #expect(vanished == expected)
        #expect(try client.blockingList() == [NameOwner(name: "bulk.extra", pid: me.pid, uid: me.uid)])
    }
}

/// A current client and a server of an older protocol (played by the test, a listening
/// port that answers a hello as such a server does): the client's first call, sent behind
/// the hello, reports the hello's refusal in the server's own words, and the client sends
/// nothing after it.
@Suite("Names: a current client and an older server")
struct OlderServerTests {
    @Test func aCurrentClientRefusesAnOlderServerClearly() throws {
        let directory = TestDirectory()
        let loop = PortLoop()
        let requests = Locked<[UInt32]>([])
        let server = try loop.port(address: directory.address) { message in
            requests.withLock { $0.append(message.id) }
            return NameReply.encode(.protocolError("protocol version 4 asked, this server speaks 1 to 3"))
        }
        defer { server.invalidate() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        for _ in 0..<2 {
            do {
                _ = try client.blockingLookup("x")
                Issue.record("served by an older server")
            } catch {
                guard case .protocolError(let detail) = error else {
                    Issue.record("lookup: \(error)")
                    return
                }
                #expect(detail.contains("this server speaks 1 to 3"), "\(detail)")
            }
        }
        #expect(requests.withLock { $0 } == [NameOperation.hello.rawValue, NameOperation.lookup.rawValue])
    }
}
