import Glibc
import NamedPortServer
import PermanentThread
import PortKitTestSupport
import Testing

/// Who holds a name another node holds: `owner(of:)` and `portname lookup` at one node
/// answer with the owner's pid on its node and the node, as `list` shows it.
@Suite("Cluster: the owner of a name on another node", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct RemoteOwnerTests {
    @Test func ownerAndPortnameLookupAnswerWithTheNode() async throws {
        let waiter = PermanentThread(name: "owner-wait")
        try waiter.run()
        defer { waiter.stop() }
        let etcd = try EtcdServer()
        let a = try PortnamedNode("a", etcd: etcd)
        let b = try PortnamedNode("b", etcd: etcd)
        let client = try NameServerClient.blockingConnect(to: b.address)
        defer { client.close() }

        // A wait at B for a name no node holds yet ends when a client of A registers it: on
        // a thread of its own (the tests' task pool may be busy with other tests).
        let waited = Recorder<Result<NameOwner, NameServerError>>()
        try waiter.execute {
            waited.append(Result { () throws(NameServerError) in try client.blockingOwner(of: "demo", waitingUpTo: .seconds(120)) })
        }
        #expect(try eventually(timeout: .seconds(60)) { try client.status().waitingLookups == 1 })
        let owner = try a.serve("demo", echo: true)
        defer { owner.kill() }
        let there = NameOwner(name: "demo", pid: owner.pid, uid: getuid(), node: "a")
        #expect(eventually(timeout: .seconds(120)) { waited.count == 1 })
        #expect(try waited.all.first?.get() == there)

        // Asked again, blocking and async, and from the shell.
        #expect(try client.blockingOwner(of: "demo") == there)
        #expect(try await client.owner(of: "demo") == there)
        let (status, output) = try ChildProcess.run(
            executable: SpawnedProcess.product("portname"), ["--address", b.address, "lookup", "demo"])
        #expect(status == 0 && output == "\(owner.pid)\ta\n", "\(output)")
        let (jsonStatus, json) = try ChildProcess.run(
            executable: SpawnedProcess.product("portname"), ["--address", b.address, "lookup", "demo", "--json"])
        #expect(jsonStatus == 0 && json == "{\"name\": \"demo\", \"pid\": \(owner.pid), \"uid\": \(getuid()), \"node\": \"a\"}\n", "\(json)")

        // At A, the name is this host's: no node.
        let atA = try NameServerClient.blockingConnect(to: a.address)
        defer { atA.close() }
        #expect(try atA.blockingOwner(of: "demo") == NameOwner(name: "demo", pid: owner.pid, uid: getuid()))

        // Once its owner is gone, B answers not found again.
        owner.kill()
        #expect(eventually(timeout: .seconds(60)) {
            (try? client.blockingOwner(of: "demo")) == nil
        })
        #expect(throws: NameServerError.notFound(name: "demo")) { try client.blockingOwner(of: "demo") }
    }
}
