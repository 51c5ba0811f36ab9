import Foundation
import Glibc
import PermanentThread
@testable import PortCluster
import PortKitTestSupport
import Testing

/// The directory client against a real etcd started on loopback for each test.
@Suite("Cluster: the etcd directory client", .enabled(if: EtcdServer.testsRun, "etcd is not installed (apt-get install etcd-server)"))
struct EtcdClientTests {
    @Test func keysArePutReadListedInKeyOrderAndDeleted() throws {
        let etcd = try EtcdServer()
        let client = try EtcdClient(endpoint: etcd.endpoint)
        let first = try client.put("names/b", value: [2])
        let second = try client.put("names/a", value: [1])
        try client.put("other/a", value: [9])
        #expect(second > first)

        let (entries, revision) = try client.list(prefix: "names/")
        #expect(entries.map(\.key) == ["names/a", "names/b"])
        #expect(entries.map(\.value) == [[1], [2]])
        #expect(revision >= second)
        #expect(try client.get("names/a").entry?.createRevision == second)
        #expect(try client.get("names/none").entry == nil)

        #expect(try client.delete("names/a"))
        #expect(try !client.delete("names/a"))
        #expect(try client.list(prefix: "names/").entries.map(\.key) == ["names/b"])
    }

    @Test func aKeyIsCreatedOnceAndASecondClaimLearnsItsHolder() throws {
        let etcd = try EtcdServer()
        let client = try EtcdClient(endpoint: etcd.endpoint)
        let lease = try client.grantLease(ttl: 30)
        guard case .created(let revision) = try client.create("names/db", value: Array("node-a".utf8), lease: lease.id) else {
            Issue.record("the first claim did not create the key")
            return
        }
        let second = try client.create("names/db", value: Array("node-b".utf8))
        #expect(second == .taken(DirectoryEntry(
            key: "names/db", value: Array("node-a".utf8), createRevision: revision, modRevision: revision, lease: lease.id)))
        // Deleting under another lease leaves it; under its own, it goes.
        #expect(try !client.delete("names/db", ifOnLease: lease.id + 1))
        #expect(try client.delete("names/db", ifOnLease: lease.id))
        #expect(try client.get("names/db").entry == nil)
    }

    @Test func aRevokedLeaseTakesItsKeysAndIsThenUnknown() throws {
        let etcd = try EtcdServer()
        let client = try EtcdClient(endpoint: etcd.endpoint)
        let lease = try client.grantLease(ttl: 30)
        #expect(lease.ttl == 30)
        try client.put("names/a", value: [1], lease: lease.id)
        try client.put("names/b", value: [2], lease: lease.id)
        #expect(try client.keepAlive(lease.id) > 0)
        try client.revoke(lease.id)
        #expect(try client.list(prefix: "names/").entries.isEmpty)
        #expect(throws: DirectoryError.leaseNotFound(lease.id)) { try client.keepAlive(lease.id) }
        #expect(throws: DirectoryError.leaseNotFound(lease.id)) { try client.put("names/c", value: [3], lease: lease.id) }
    }

    @Test func aLeaseNotRenewedExpiresWithItsKeys() throws {
        let etcd = try EtcdServer()
        let client = try EtcdClient(endpoint: etcd.endpoint)
        let lease = try client.grantLease(ttl: 2)
        try client.put("names/short", value: [1], lease: lease.id)
        #expect(try eventually(timeout: .seconds(60)) { try client.get("names/short").entry == nil }, "the key outlived its lease by a minute")
        #expect(throws: DirectoryError.leaseNotFound(lease.id)) { try client.keepAlive(lease.id) }
    }

    @Test func aWatchFromAListsNextRevisionGetsEveryLaterChangeInOrder() throws {
        let etcd = try EtcdServer()
        let client = try EtcdClient(endpoint: etcd.endpoint)
        try client.put("names/old", value: [0])
        let (entries, revision) = try client.list(prefix: "names/")
        #expect(entries.map(\.key) == ["names/old"])
        // Changes made before the watch opens are not missed: it starts at revision + 1.
        try client.put("names/x", value: [1])
        try client.put("other/y", value: [2])
        let watch = try client.watch(prefix: "names/", fromRevision: revision + 1)
        try client.put("names/y", value: [3])
        try client.delete("names/x")
        let changes = try collect(watch, count: 3)
        #expect(changes.map(describe) == ["+names/x", "+names/y", "-names/x"])
        #expect(watch.nextRevision == (try client.get("names/none").revision) + 1)
    }

    @Test func aWatchResumesAcrossAnEtcdRestartWithNoGapAndNoDuplicate() throws {
        let etcd = try EtcdServer()
        let client = try EtcdClient(endpoint: etcd.endpoint, timeout: .seconds(2))
        let watch = try client.watch(prefix: "names/", fromRevision: try client.list(prefix: "names/").revision + 1)
        try client.put("names/a", value: [1])
        #expect(try collect(watch, count: 1).map(describe) == ["+names/a"])

        etcd.kill()
        #expect {
            try client.put("names/lost", value: [0])
        } throws: { error in
            guard case DirectoryError.unavailable(let endpoint, _) = error else { return false }
            return endpoint == etcd.endpoint
        }
        #expect {
            _ = try watch.next(timeout: .seconds(5))
        } throws: { error in
            if case DirectoryError.unavailable = error { true } else { false }
        }

        try etcd.start()
        try client.put("names/b", value: [2])
        try client.delete("names/a")
        #expect(try collect(watch, count: 2).map(describe) == ["+names/b", "-names/a"])
    }

    @Test func anUnreachableDirectoryIsATypedError() throws {
        let etcd = try EtcdServer()
        let endpoint = etcd.endpoint
        etcd.kill()
        let client = try EtcdClient(endpoint: endpoint, timeout: .seconds(2))
        #expect {
            _ = try client.get("names/a")
        } throws: { error in
            guard case DirectoryError.unavailable(let at, let reason) = error else { return false }
            return at == endpoint && reason.contains("refused")
        }
        #expect(throws: DirectoryError.invalidEndpoint("https://127.0.0.1:2379")) { try EtcdClient(endpoint: "https://127.0.0.1:2379") }
        #expect(throws: DirectoryError.invalidEndpoint("http://host")) { try EtcdClient(endpoint: "http://host") }
    }

    // MARK: Helpers

    /// Reads `count` changes from `watch`, reopening it while etcd is coming back, within a minute.
    private func collect(_ watch: EtcdWatch, count: Int) throws -> [DirectoryChange] {
        var changes: [DirectoryChange] = []
        let deadline = ContinuousClock.now + .seconds(60)
        while changes.count < count, ContinuousClock.now < deadline {
            do {
                changes += try watch.next(timeout: .seconds(1))
            } catch DirectoryError.unavailable {
                usleep(100_000)  // paces the retries while etcd restarts
            }
        }
        return changes
    }

    private func describe(_ change: DirectoryChange) -> String {
        switch change {
        case .put(let entry): "+" + entry.key
        case .delete(let key, _): "-" + key
        }
    }
}
