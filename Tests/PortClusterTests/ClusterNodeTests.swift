import Glibc
import PermanentThread
import PortCluster
import PortKitTestSupport
import Testing

/// Nodes on a real etcd: names unique across nodes, mirrored by every node, gone with a
/// dead node's lease, kept through a directory outage, and published again after a pause.
@Suite("Cluster: nodes publishing names on etcd", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct ClusterNodeTests {
    private func connectedNode(_ etcd: EtcdServer, _ name: String, ttl: Int = 5) throws -> (ClusterNode, Recorder<ClusterEvent>) {
        let events = Recorder<ClusterEvent>()
        let node = try ClusterNode(directory: etcd.endpoint, node: name, leaseTTL: ttl) { events.append($0) }
        #expect(eventually(timeout: .seconds(60)) { node.isConnected }, "node \(name) did not connect")
        return (node, events)
    }

    private func changes(_ events: Recorder<ClusterEvent>, of name: String) -> [String] {
        events.all.compactMap { event in
            guard case .ownerChanged(name, let owner) = event else { return nil }
            return owner?.node ?? "-"
        }
    }

    @Test func aNameIsUniqueAcrossNodesAndEveryNodeSeesEveryOwner() throws {
        let etcd = try EtcdServer()
        let (a, _) = try connectedNode(etcd, "a")
        let (b, bEvents) = try connectedNode(etcd, "b")
        let ownerA = ClusterOwner(node: "a", pid: 11, address: "10.0.0.1:7000")
        #expect(a.publish("db", owner: ownerA) == .published)
        #expect(eventually(timeout: .seconds(30)) { b.owner(of: "db") == ownerA })
        #expect(b.publish("db", owner: ClusterOwner(node: "b", pid: 22)) == .taken(by: ownerA))

        a.withdraw("db")
        #expect(eventually(timeout: .seconds(30)) { b.owner(of: "db") == nil })
        #expect(b.publish("db", owner: ClusterOwner(node: "b", pid: 22)) == .published)
        #expect(eventually(timeout: .seconds(30)) { a.owner(of: "db")?.node == "b" && b.owner(of: "db")?.node == "b" })
        // The event follows the mirror's change, from the node's thread: wait for it.
        #expect(eventually(timeout: .seconds(30)) { changes(bEvents, of: "db").count >= 3 })
        #expect(changes(bEvents, of: "db") == ["a", "-", "b"])
        a.close()
        b.close()
    }

    @Test func aKilledNodesNamesGoWhenItsLeaseExpires() throws {
        let etcd = try EtcdServer()
        let child = try SpawnedProcess.helper("cluster-node", [etcd.endpoint, "doomed", "2"])
        #expect(try child.readLine(within: .seconds(60)) == "up")
        child.send("publish x")
        #expect(try child.readLine(within: .seconds(60)) { $0.hasPrefix("publication") } == "publication x published")

        let (b, bEvents) = try connectedNode(etcd, "b")
        #expect(b.owner(of: "x")?.node == "doomed")
        child.kill()
        // Nothing revoked the lease: the names go when it expires, a few seconds on.
        #expect(eventually(timeout: .seconds(60)) { b.owner(of: "x") == nil })
        // What a node finds when it connects is reported too: the owner, then its end.
        #expect(eventually(timeout: .seconds(30)) { changes(bEvents, of: "x").count >= 2 })
        #expect(changes(bEvents, of: "x") == ["doomed", "-"])
        #expect(b.publish("x", owner: ClusterOwner(node: "b", pid: 22)) == .published)
        b.close()
    }

    @Test func aDirectoryOutageLosesNoPublication() throws {
        let etcd = try EtcdServer()
        let (a, events) = try connectedNode(etcd, "a")
        #expect(a.publish("one", owner: ClusterOwner(node: "a", pid: 1)) == .published)
        // The mirror learns a publication from the watch, which may trail `publish`.
        #expect(eventually(timeout: .seconds(30)) { a.owner(of: "one")?.node == "a" })

        let before = events.count
        etcd.kill()
        #expect(eventually(timeout: .seconds(60)) { events.all.dropFirst(before).contains { if case .directoryDown = $0 { true } else { false } } })
        guard case .pending(.unavailable) = a.publish("two", owner: ClusterOwner(node: "a", pid: 1)) else {
            Issue.record("a publication while the directory is down is not pending")
            return
        }
        #expect(a.owner(of: "one")?.node == "a")  // the mirror keeps what it knew

        try etcd.start()
        #expect(eventually(timeout: .seconds(60)) { events.all.contains(.published("two")) })
        let fresh = try EtcdClient(endpoint: etcd.endpoint)
        #expect(try fresh.list(prefix: "portkit/names/").entries.map(\.key) == ["portkit/names/one", "portkit/names/two"])
        let order = events.all.dropFirst(before).filter { if case .ownerChanged = $0 { false } else { true } }
        #expect(order.first.map { if case .directoryDown = $0 { true } else { false } } == true)
        #expect(order.dropFirst().first == .directoryUp)
        a.close()
    }

    @Test func aNodePausedPastItsLeasePublishesAgainAndReportsWhatItLost() throws {
        let etcd = try EtcdServer()
        let paused = try SpawnedProcess.helper("cluster-node", [etcd.endpoint, "paused", "2"])
        #expect(try paused.readLine(within: .seconds(60)) == "up")
        for name in ["p", "q"] {
            paused.send("publish \(name)")
            #expect(try paused.readLine(within: .seconds(60)) { $0.hasPrefix("publication") } == "publication \(name) published")
        }
        let (b, _) = try connectedNode(etcd, "b")
        #expect(b.owner(of: "p")?.node == "paused")

        paused.signal(SIGSTOP)
        #expect(eventually(timeout: .seconds(60)) { b.owner(of: "p") == nil && b.owner(of: "q") == nil })
        #expect(b.publish("p", owner: ClusterOwner(node: "b", pid: 22)) == .published)
        paused.signal(SIGCONT)

        // Its lease expired while it was stopped: it takes a new one and claims its names
        // again; one of them another node holds now.
        var reported: Set<String> = []
        while reported.count < 2 {
            let line = try paused.readLine(within: .seconds(60)) { $0.hasPrefix("lost") || $0.hasPrefix("published") }
            reported.insert(line)
        }
        #expect(reported == ["lost p b", "published q"])
        #expect(eventually(timeout: .seconds(30)) { b.owner(of: "q")?.node == "paused" })
        #expect(b.owner(of: "p")?.node == "b")
        paused.kill()
        b.close()
    }
}
