import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortMessaging
import Testing

/// `list` and a watch's snapshot carry any number of names: a reply too long for one frame
/// goes in parts to a version 3 client, and an older client gets a clear refusal.
@Suite("Names: many names in one reply", .serialized)
struct ManyNamesTests {
    /// 10,000 names, served by a server in a child: `list`, a watch's snapshot, `portname
    /// list`, and the events after the snapshot, all complete and in order.
    @Test func tenThousandNamesListAndWatch() throws {
        let count = 10_000
        let directory = TestDirectory()
        let server = try SpawnedProcess.helper("names-server", [directory.address, "--max-names", "\(count + 10)"])
        defer { server.kill() }
        #expect(try server.readLine() == "listening on \(directory.address)")
        // The owner speaks version 1 (no offer channels), so 10,000 names cost no descriptors
        // and fit any RLIMIT_NOFILE.
        let owner = try RawNameClient(address: directory.address)
        #expect(try owner.hello(1))
        for index in 0..<count {
            let reply = try owner.request(.register, [NameField.string("bulk.\(index)")])
            try #require(reply.message.id == NameStatus.ok.rawValue, "register bulk.\(index): \(reply.message)")
        }
        let me = (pid: getpid(), uid: UInt32(getuid()))
        let expected = (0..<count).map { NameOwner(name: "bulk.\($0)", pid: me.pid, uid: me.uid) }.sorted { $0.name < $1.name }

        let client = try NameServerClient.connect(to: directory.address, timeout: .seconds(60))
        #expect(try client.list() == expected)
        let all = try client.watch(prefix: "bulk.")
        #expect(all.initialOwners == expected)
        let some = try client.watch(prefix: "bulk.99")
        #expect(some.initialOwners == expected.filter { $0.name.hasPrefix("bulk.99") })
        #expect(some.initialOwners.count == 111)

        let list = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", directory.address, "list"])
        let lines = try list.remainingLines(within: .seconds(60))
        #expect(try list.wait(within: .seconds(60)) == .exited(0))
        #expect(lines == expected.map(\.description))

        // The events come after the snapshot: one more name, then the owner's connection
        // ends and its 10,000 go, in name order.
        let extra = try NameServerClient.connect(to: directory.address)
        try extra.register("bulk.extra", port: ReceivePort())
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
        #expect(try client.list() == [NameOwner(name: "bulk.extra", pid: me.pid, uid: me.uid)])
    }

    /// A version 2 client asking for more names than one frame holds gets `limitExceeded`
    /// (its connection stays), while a current client gets them all.
    @Test func anOlderClientGetsALimitNotAHangUp() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(maxNamesPerConnection: 1000))
        defer { server.stop() }
        // A version 1 owner registers without offer channels: no descriptors per name.
        let owner = try RawNameClient(address: directory.address)
        defer { owner.close() }
        #expect(try owner.hello(1))
        for index in 0..<400 {
            #expect(try owner.request(.register, [NameField.string("n.\(index)")]).message.id == NameStatus.ok.rawValue)
        }
        let old = try RawNameClient(address: directory.address)
        defer { old.close() }
        #expect(try old.hello(2))
        let refused = try old.request(.list, [])
        let error = NameReply.decode(status: refused.message.id, refused.message.components, address: directory.address)
        guard case .limitExceeded(_, let limit) = error else {
            Issue.record("a version 2 list of 400 names: \(error)")
            return
        }
        #expect(limit == 341)
        // Still connected: a smaller answer comes whole.
        let watch = try old.request(.watch, [NameField.integer(1), NameField.string("n.1"), NameField.integer(0)])
        #expect(watch.message.id == NameStatus.ok.rawValue && watch.message.components.count == 3 * 111)

        let current = try NameServerClient.connect(to: directory.address)
        #expect(try current.list().map(\.name) == (0..<400).map { "n.\($0)" }.sorted())
    }
}

/// A current client and a server that speaks version 2 only (played by the test): the
/// client's hello of version 3 is refused, it says hello with 2 on the same connection,
/// and then works, one frame a reply.
@Suite("Names: a current client and an older server")
struct OlderServerTests {
    @Test func aCurrentClientFallsBackToVersion2() throws {
        let directory = TestDirectory()
        let listener = try UnixSocket.make(nonBlocking: false)
        defer { try? listener.close() }
        try UnixSocket.bind(listener, to: directory.address)
        try UnixSocket.listen(listener, backlog: 4)
        let hellos = Locked<[UInt64]>([])
        let served = ConditionLock(false)
        Thread {
            defer {
                served.withLock { $0 = true }
                served.broadcast()
            }
            guard let socket = try? UnixSocket.accept(listener) ?? nil else { return }
            defer { try? socket.close() }
            var reader = FrameReader()
            func answer(_ request: WireMessage, _ status: NameStatus, _ components: [WireComponent]) {
                let reply = WireMessage(kind: .reply, id: status.rawValue, sequence: request.sequence, components: components)
                if let frame = try? reply.frame() { _ = frame.bytes.withUnsafeBytes { try? socket.send($0) } }
            }
            while (try? socket.poll(CShort(POLLIN), timeout: .seconds(30))) ?? 0 != 0 {
                let (frames, end) = reader.read(from: socket)
                for frame in frames {
                    var fields = NameFieldReader(frame.message.components)
                    switch NameOperation(rawValue: frame.message.id) {
                    case .hello?:
                        let version = (try? fields.integer()) ?? 0
                        hellos.withLock { $0.append(version) }
                        if version > 2 {
                            answer(frame.message, .badRequest, [NameField.string("protocol version \(version) asked, this server speaks 1 to 2")])
                        } else {
                            answer(frame.message, .ok, [NameField.integer(Int32(77)), NameField.integer(UInt32(0)), NameField.integer(UInt64(2))])
                        }
                    case .list?:
                        answer(frame.message, .ok, NameField.owner(NameOwner(name: "old.name", pid: 77, uid: 0)))
                    default:
                        answer(frame.message, .badRequest, [NameField.string("not played")])
                    }
                }
                if end != nil { return }
            }
        }.start()
        let client = try NameServerClient.connect(to: directory.address)
        #expect(client.serverPID == 77)
        #expect(try client.list() == [NameOwner(name: "old.name", pid: 77, uid: 0)])
        client.close()
        #expect(served.wait(until: .now + .seconds(30)) { $0 ? true : nil } == true)
        #expect(hellos.withLock { $0 } == [3, 2])
    }
}
