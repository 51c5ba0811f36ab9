import Glibc
import NamedPortServer
import PermanentThread
@testable import PortCluster
import PortKitTestSupport
import Testing

/// A directory that stops answering (SIGSTOP: its connections are still accepted, nothing
/// answers them) never holds up a node's loop; the node catches up once it resumes.
@Suite("Cluster: a stopped directory never holds up a node's loop", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct StoppedDirectoryTests {
    /// How long `work` took.
    private func timed(_ work: () throws -> Void) rethrows -> Duration {
        let start = ContinuousClock.now
        try work()
        return .now - start
    }

    /// The directory's names, as "NAME NODE", read with a client of its own.
    private func directoryNames(_ etcd: EtcdServer) -> [String]? {
        guard let client = try? EtcdClient(endpoint: etcd.endpoint, timeout: .seconds(1)),
              let entries = try? client.list(prefix: ClusterNode.defaultPrefix).entries else { return nil }
        return entries.map { entry in
            String(entry.key.dropFirst(ClusterNode.defaultPrefix.count)) + " " + (ClusterOwner(directoryValue: entry.value)?.node ?? "?")
        }
    }

    @Test func theNodesLoopAnswersWhileEtcdIsStoppedAndCatchesUpWhenItResumes() throws {
        let etcd = try EtcdServer()
        // A call to etcd may take 2 s: a loop that waited for one would show it below.
        let events = Recorder<ClusterEvent>()
        let node = try ClusterNode(directory: etcd.endpoint, node: "a", leaseTTL: 10, timeout: .seconds(2)) { events.append($0) }
        defer { node.close() }
        #expect(eventually(timeout: .seconds(60)) { node.isConnected })
        let daemon = try PortnamedNode("p", etcd: etcd, leaseTTL: 10)
        let served = try daemon.serve("svc")
        defer { served.kill() }
        let owner = ClusterOwner(node: "a", pid: 1)
        #expect(node.publish("kept", owner: owner) == .published)
        #expect(node.publish("dropped", owner: owner) == .published)
        #expect(eventually(timeout: .seconds(30)) { directoryNames(etcd)?.sorted() == ["dropped a", "kept a", "svc p"] })
        let client = try NameServerClient.blockingConnect(to: daemon.address)
        defer { client.close() }

        defer { etcd.signal(SIGCONT) }  // never left stopped, whatever fails below
        try etcd.stop()
        let stopped = ContinuousClock.now
        var slowest: [String: Duration] = [:]
        func record(_ what: String, _ took: Duration) { slowest[what] = max(slowest[what] ?? .zero, took) }

        var fresh: ClusterPublication?
        record("publish", timed { fresh = node.publish("fresh", owner: owner, waitingUpTo: .milliseconds(100)) })
        record("withdraw", timed { node.withdraw("dropped") })
        var late: SpawnedProcess?
        // A cluster-scope registration at the daemon (a child process, spawned and served).
        record("serve", try timed { late = try daemon.serve("svc2") })
        defer { late?.kill() }
        while ContinuousClock.now - stopped < .seconds(5) {
            record("loop pass", try timed { try node.thread.sync {} })
            record("mirror", timed { _ = node.owner(of: "kept"); _ = node.names })
            record("lookup", try timed { _ = try client.blockingLookup("svc") })
            usleep(20_000)  // paces the probes; it synchronises nothing
        }
        guard case .pending? = fresh else {
            Issue.record("a publication while etcd is stopped is \(String(describing: fresh)), not pending")
            return
        }
        // Every call returned well within a directory call's time-out (2 s); spawning
        // the server's child process is given more room on a loaded machine.
        for (what, took) in slowest {
            #expect(took < (what == "serve" ? .milliseconds(1500) : .milliseconds(500)), "\(what) took \(took) while etcd was stopped")
        }
        print("slowest while etcd was stopped:", slowest.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        // The claim of "fresh" was in flight on the node's loop and timed out meanwhile.
        let outage = events.all.firstIndex { if case .directoryDown = $0 { true } else { false } }
        #expect(outage != nil, "the node did not see etcd stop: \(events.all)")
        etcd.signal(SIGCONT)

        // It renews (or takes a new lease), claims the pending name, withdraws the other.
        #expect(eventually(timeout: .seconds(30)) { directoryNames(etcd)?.sorted() == ["fresh a", "kept a", "svc p", "svc2 p"] })
        #expect(eventually(timeout: .seconds(30)) { node.owner(of: "fresh")?.node == "a" && node.owner(of: "dropped") == nil })
        #expect(events.all.dropFirst((outage ?? 0) + 1).contains(.directoryUp))
    }
}
