import Foundation
import Glibc
import NamedPortServer
import PortCluster
import PortKitTestSupport
import Testing

/// Two `portnamed` nodes joined to one real etcd, as separate processes with their own
/// Unix addresses: names registered on either are published, unique, withdrawn when their
/// owner dies, gone with a killed node's lease, and back after an etcd restart.
@Suite("Cluster: portnamed nodes on etcd", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct ClusterDaemonTests {
    private typealias Node = PortnamedNode

    /// `portname list --cluster URL`: the directory's names as "NAME NODE PID".
    private func clusterNames(_ etcd: EtcdServer) throws -> [String] {
        let (status, output) = try ChildProcess.run(executable: SpawnedProcess.product("portname"), ["list", "--cluster", etcd.endpoint])
        guard status == 0 else { return ["exit \(status)"] }
        return output.split(separator: "\n").map { $0.replacingOccurrences(of: "\t", with: " ") }
    }

    @Test func aNameRegisteredOnOneNodeIsPublishedUniqueAndWithdrawnWhenItsOwnerDies() throws {
        let etcd = try EtcdServer()
        let a = try Node("a", etcd: etcd)
        let b = try Node("b", etcd: etcd)
        let owner = try a.serve("db")
        #expect(try eventually(timeout: .seconds(30)) { try clusterNames(etcd) == ["db a \(owner.pid)"] })

        // The same name on the other node, once its mirror has the first claim: refused,
        // naming the node and the process that hold it.
        #expect(eventually(timeout: .seconds(60)) { b.daemon.standardError().contains("cluster: db held by process \(owner.pid) on node a") })
        let (status, output) = try ChildProcess.run(executable: SpawnedProcess.product("portname"), ["--address", b.address, "serve", "db", "--cluster"])
        #expect(status == 1)
        #expect(output.isEmpty)
        #expect(b.daemon.standardError().contains("name 'db' is taken by process \(owner.pid) on node a"))
        #expect(try clusterNames(etcd) == ["db a \(owner.pid)"])

        owner.kill()
        #expect(try eventually(timeout: .seconds(30)) { try clusterNames(etcd).isEmpty })
    }

    /// A name registered without cluster scope stays on its host: it is not published, and
    /// another node may hold the same name for itself, even one the cluster knows.
    @Test func aHostScopedNameStaysOnItsHost() throws {
        let etcd = try EtcdServer()
        let a = try Node("a", etcd: etcd)
        let b = try Node("b", etcd: etcd)
        let local = try a.serve("local-only", hostOnly: true)
        let shared = try a.serve("shared")
        #expect(try eventually(timeout: .seconds(30)) { try clusterNames(etcd) == ["shared a \(shared.pid)"] })
        #expect(eventually(timeout: .seconds(60)) { b.daemon.standardError().contains("cluster: shared held by process \(shared.pid) on node a") })
        // B's own "shared", for B's host only, is accepted beside A's cluster name.
        let mine = try b.serve("shared", hostOnly: true)
        #expect(try clusterNames(etcd) == ["shared a \(shared.pid)"])
        let client = try NameServerClient.blockingConnect(to: b.address)
        defer { client.close() }
        #expect(try client.blockingOwner(of: "shared").pid == mine.pid)
        #expect(throws: NameServerError.notFound(name: "local-only")) { try client.blockingLookup("local-only") }
        local.kill()
        shared.kill()
        mine.kill()
    }

    /// A node's name server lists and watches the names other nodes hold, with their node;
    /// a name held at both shows as this host's while it is held here.
    @Test func aNodesServerListsAndWatchesTheOtherNodesNames() throws {
        let etcd = try EtcdServer()
        let a = try Node("a", etcd: etcd)
        let b = try Node("b", etcd: etcd)
        let client = try NameServerClient.blockingConnect(to: b.address)
        defer { client.close() }
        let watch = try client.blockingWatch(prefix: "svc.")
        #expect(watch.initialOwners.isEmpty)
        let owner = try a.serve("svc.db")
        let uid = UInt32(getuid())
        let there = NameOwner(name: "svc.db", pid: owner.pid, uid: uid, node: "a")
        #expect(try watch.next(timeout: .seconds(60)) == .appeared(there))
        #expect(try client.blockingList() == [there])
        let (status, output) = try ChildProcess.run(executable: SpawnedProcess.product("portname"), ["--address", b.address, "list"])
        #expect(status == 0 && output == "svc.db\t\(owner.pid)\t\(uid)\ta\n", "\(output)")

        // The same name held at B for its host: B's own shows while it lasts.
        let mine = try b.serve("svc.db", hostOnly: true)
        let here = NameOwner(name: "svc.db", pid: mine.pid, uid: uid)
        #expect(try watch.next(timeout: .seconds(60)) == .vanished(there))
        #expect(try watch.next(timeout: .seconds(60)) == .appeared(here))
        #expect(try client.blockingList() == [here])
        mine.kill()
        #expect(try watch.next(timeout: .seconds(60)) == .vanished(here))
        #expect(try watch.next(timeout: .seconds(60)) == .appeared(there))

        owner.kill()
        #expect(try watch.next(timeout: .seconds(60)) == .vanished(there))
        #expect(try client.blockingList().isEmpty)
        // A watch started now begins from the same view.
        #expect(try client.blockingWatch(prefix: "svc.").initialOwners.isEmpty)
    }

    @Test func aKilledNodesNamesLeaveTheDirectoryWhenItsLeaseExpires() throws {
        let etcd = try EtcdServer()
        let a = try Node("a", etcd: etcd, leaseTTL: 4)
        let owner = try a.serve("cache")
        #expect(try eventually(timeout: .seconds(30)) { try clusterNames(etcd) == ["cache a \(owner.pid)"] })
        a.daemon.kill()
        let killed = ContinuousClock.now
        #expect(try eventually(timeout: .seconds(60)) { try clusterNames(etcd).isEmpty })
        // Gone with the lease (4 s, renewed every 1.3 s), not before: nothing revoked it.
        #expect(ContinuousClock.now - killed >= .seconds(1))
        owner.kill()
    }

    @Test func namesAreBackWithoutDuplicatesAfterAnEtcdRestart() throws {
        let etcd = try EtcdServer()
        let a = try Node("a", etcd: etcd, leaseTTL: 5)
        let b = try Node("b", etcd: etcd, leaseTTL: 5)
        let first = try a.serve("one")
        let second = try b.serve("two")
        let expected = ["one a \(first.pid)", "two b \(second.pid)"]
        #expect(try eventually(timeout: .seconds(30)) { try clusterNames(etcd) == expected })

        etcd.kill()
        #expect(try clusterNames(etcd) == ["exit 5"])
        try etcd.start()
        #expect(try eventually(timeout: .seconds(60)) { try clusterNames(etcd) == expected })
        first.kill()
        second.kill()
    }
}

/// The two-node example, run as the program it is against a real etcd.
@Suite("Examples: two cluster nodes on one machine", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct ClusterExampleTests {
    @Test func theTwoNodeExampleGoesThroughEveryStep() throws {
        let etcd = try EtcdServer()
        let (status, output) = try ChildProcess.run(executable: SpawnedProcess.product("cluster-two-nodes"), [etcd.endpoint])
        #expect(status == 0, "the example said: \(output)")
        #expect(output.split(separator: "\n").map(String.init) == [
            "east and west joined the directory at \(etcd.endpoint)",
            "east published db",
            "west: db is taken by process \(output.processID) on node east",
            "west's mirror: db belongs to east",
            "east withdrew db; west saw it go",
            "west published db",
            "east's mirror: db belongs to west",
            "west stopped: its lease revoked, db is free",
        ])
        // Its names lived under a prefix of its own: nothing is left in the directory.
        let leftover = try EtcdClient(endpoint: etcd.endpoint).list(prefix: "portkit-example/").entries
        #expect(leftover.isEmpty)
    }
}

extension String {
    /// The pid in the example's "taken by process N on node east" line.
    fileprivate var processID: String {
        guard let range = range(of: "taken by process ") else { return "?" }
        return String(self[range.upperBound...].prefix { $0.isNumber })
    }
}
