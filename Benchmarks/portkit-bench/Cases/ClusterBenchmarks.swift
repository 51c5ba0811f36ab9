import Dispatch
import Foundation
import Glibc
import NamedPortServer
import PermanentThread
import PortCluster
import PortMessaging

/// Names across hosts, on a private etcd (`BenchEtcd`) with two cluster nodes in this
/// process: node A publishes a name whose owner it reaches through its gateway, node B
/// finds it in its mirror and connects. Everything is on loopback, so the figures are the
/// software's, not a network's. Without etcd the cases are left out, with the reason.
enum ClusterBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        let call = call(count: scale.count(2000, quick: 100))
        return [
            lookup(count: scale.count(300, quick: 10)),
            call,
            death(count: scale.count(20, quick: 3)),
            // Every node, gateway and owner of the fixture is in this process (etcd is not on
            // a call's path): on one CPU, what the code costs against the TLS floors.
            call.pinned(.together, as: "cluster.call-same-cpu"),
        ]
    }

    /// The key node A publishes `name` under.
    static func key(_ name: String) -> String { Data((ClusterNode.defaultPrefix + name).utf8).base64EncodedString() }

    /// `cluster.lookup`: a port to a name held on node A, for a program on node B. `portkit`:
    /// a lookup at B's name server on a kept connection, answered with a port to B's relay
    /// of the name (its connection to A's gateway made by the first lookup and kept);
    /// `portkit-connect`: `ClusterNode.connect(toName:)` on B, from its mirror to a new
    /// connection through A's gateway that has opened the name (a TCP connection, its TLS
    /// handshake and one request). Against `raw`: one range request for the name's key to
    /// etcd on a kept HTTP connection (which hands back the owner's record, not a port).
    static func lookup(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "cluster.lookup", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try ClusterFixture()
                let client = try NameServerClient.blockingConnect(to: fixture.serverB.address)
                // The first lookup makes B's relay and its connection to A.
                try client.blockingLookup(ClusterFixture.name).invalidate()
                return .init(
                    measure: {
                        try NameBenchmarks.medianMicroseconds(count) {
                            let start = ContinuousClock.now
                            let port = try client.blockingLookup(ClusterFixture.name)
                            let elapsed = start.duration(to: .now)
                            port.invalidate()
                            return elapsed
                        }
                    },
                    stop: {
                        client.close()
                        fixture.stop()
                    })
            },
            BenchmarkImpl("portkit-connect") {
                let fixture = try ClusterFixture()
                return .init(
                    measure: {
                        try NameBenchmarks.medianMicroseconds(count) {
                            let start = ContinuousClock.now
                            let port = try fixture.nodeB.connect(toName: ClusterFixture.name, security: fixture.security)
                            let elapsed = start.duration(to: .now)
                            port.invalidate()
                            return elapsed
                        }
                    },
                    stop: fixture.stop)
            },
            BenchmarkImpl("raw") {
                let etcd = try BenchEtcd()
                let http = try RawEtcdHTTP(port: etcd.clientPort)
                let key = key(ClusterFixture.name)
                try http.post("/v3/kv/put", #"{"key":"\#(key)","value":"e30="}"#)
                return .init(
                    measure: {
                        try NameBenchmarks.medianMicroseconds(count) {
                            let start = ContinuousClock.now
                            let body = try http.post("/v3/kv/range", #"{"key":"\#(key)"}"#)
                            let elapsed = start.duration(to: .now)
                            guard body.contains(#""count":"1""#) else { throw BenchmarkError.timedOut("the key in etcd") }
                            return elapsed
                        }
                    },
                    stop: {
                        http.close()
                        etcd.stop()
                    })
            },
        ])
    }

    /// `cluster.call`: a 64-byte request from node B to the owner of a name on node A and
    /// its 64-byte reply: over TLS to A's gateway, relayed over a Unix socket to the owner,
    /// served on another thread. `raw` is one 64-byte echo over TLS on a connected
    /// loopback TCP socket (`port.tls.roundtrip`'s baseline): what any call over TLS pays;
    /// `raw-relayed` the same with the echoing thread passing the bytes over a Unix socket
    /// pair to a second thread and back: the floor of any relay, a gateway's included.
    static func call(count: Int) -> BenchmarkCase {
        let size = 64
        let request = Message(id: 1, bytes: PortBenchmarks.payload(size))
        return BenchmarkCase(name: "cluster.call", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try ClusterFixture()
                let port = try fixture.nodeB.connect(toName: ClusterFixture.name, security: fixture.security)
                return .init(
                    measure: { try PortBenchmarks.medianRequestMicroseconds(count, request, to: port, size: size) },
                    stop: {
                        port.invalidate()
                        fixture.stop()
                    })
            },
            TLSBenchmarks.rawEcho("raw", size: size, relayed: false, count: count),
            TLSBenchmarks.rawEcho("raw-relayed", size: size, relayed: true, count: count),
        ])
    }

    /// `cluster.death`: from SIGKILL of the process holding a name on node A (a
    /// `/bin/sleep` holding the connection it was registered on, as in `names.death`) to
    /// node B's `ownerChanged(name, nil)`: A's name server sees the connection end, A's
    /// node deletes the key, etcd's watch tells B. `raw`: a delete of a key on a kept HTTP
    /// connection to etcd until a raw watch stream on another connection reports it.
    static func death(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "cluster.death", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try ClusterFixture()
                return .init(measure: { try NameBenchmarks.medianMicroseconds(count) { try fixture.deathOnce() } }, stop: fixture.stop)
            },
            BenchmarkImpl("raw") {
                let etcd = try BenchEtcd()
                let writer = try RawEtcdHTTP(port: etcd.clientPort)
                let watcher = try RawEtcdHTTP(port: etcd.clientPort)
                let key = key("bench.gone")
                try watcher.startWatch(key)
                return .init(
                    measure: {
                        try NameBenchmarks.medianMicroseconds(count) {
                            try writer.post("/v3/kv/put", #"{"key":"\#(key)","value":"e30="}"#)
                            _ = try watcher.waitFor(#""kv""#)
                            let start = ContinuousClock.now
                            try writer.post("/v3/kv/deleterange", #"{"key":"\#(key)"}"#)
                            _ = try watcher.waitFor(#""DELETE""#)
                            return start.duration(to: .now)
                        }
                    },
                    stop: {
                        writer.close()
                        watcher.close()
                        etcd.stop()
                    })
            },
        ])
    }
}
