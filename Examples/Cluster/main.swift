// cluster-two-nodes: two cluster nodes on one machine, sharing names through one etcd.
//
//   etcd --data-dir /tmp/etcd &            # or any etcd v3 reachable over HTTP
//   swift run cluster-two-nodes http://127.0.0.1:2379
//
// Node "east" publishes "db"; node "west" finds it taken, and sees it in its mirror of the
// cluster's names; "east" withdraws it, and "west" publishes it. Each step prints a line.
// Exit status: 0 when every step went as described, 1 otherwise, 2 for usage errors.
import Foundation
import PortCluster

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count == 1, let endpoint = arguments.first else {
    print("usage: cluster-two-nodes ETCD_URL   (an etcd endpoint, http://HOST:PORT)")
    exit(2)
}

/// Signalled by every event of either node: a wait looks again at what it waits for.
let changed = NSCondition()

/// Waits up to `seconds` for `condition`, looking again at each event of the nodes.
func waitUntil(_ seconds: Double = 30, _ condition: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: seconds)
    changed.lock()
    defer { changed.unlock() }
    while !condition() {
        if !changed.wait(until: deadline) { return condition() }
    }
    return true
}

/// Prints `line` when `ok`, else says what failed and exits 1.
func step(_ ok: Bool, _ line: String) {
    guard ok else {
        print("failed: \(line)")
        exit(1)
    }
    print(line)
}

let prefix = "portkit-example/\(getpid())/"
let east: ClusterNode
let west: ClusterNode
/// Every event of either node, from its first connection on (on the node's thread).
let wakeWaiters: @Sendable (ClusterEvent) -> Void = { _ in
    changed.lock()
    changed.broadcast()
    changed.unlock()
}
do {
    east = try ClusterNode(directory: endpoint, node: "east", prefix: prefix, leaseTTL: 5, onEvent: wakeWaiters)
    west = try ClusterNode(directory: endpoint, node: "west", prefix: prefix, leaseTTL: 5, onEvent: wakeWaiters)
} catch {
    print("cluster-two-nodes: \(error)")
    exit(2)
}
step(waitUntil { east.isConnected && west.isConnected }, "east and west joined the directory at \(endpoint)")

let eastOwner = ClusterOwner(node: "east", pid: getpid())
let westOwner = ClusterOwner(node: "west", pid: getpid())
step(east.publish("db", owner: eastOwner) == .published, "east published db")
step(west.publish("db", owner: westOwner) == .taken(by: eastOwner), "west: db is taken by \(eastOwner)")
step(waitUntil { west.owner(of: "db") == eastOwner }, "west's mirror: db belongs to east")

east.withdraw("db")
step(waitUntil { west.owner(of: "db") == nil }, "east withdrew db; west saw it go")
step(west.publish("db", owner: westOwner) == .published, "west published db")
step(waitUntil { east.owner(of: "db") == westOwner }, "east's mirror: db belongs to west")

west.close()
step(waitUntil { east.owner(of: "db") == nil }, "west stopped: its lease revoked, db is free")
east.close()
