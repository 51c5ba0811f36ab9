import Glibc
import PortCluster

/// `cluster-node ENDPOINT NODE TTL`: a cluster node in a process of its own, for the tests
/// that kill it (SIGKILL) or pause it (SIGSTOP) for real. Prints each event as a line
/// ("up", "down", "published NAME", "lost NAME NODE", "owner NAME NODE" or "owner NAME -"),
/// and takes commands on standard input: "publish NAME" (answered "publication NAME
/// published", "… taken NODE" or "… pending"), "withdraw NAME". Ends when its input does.
let clusterNode: Scenario = { arguments in
    guard arguments.count == 3, let ttl = Int(arguments[2]) else {
        say("usage: cluster-node ENDPOINT NODE TTL")
        return 2
    }
    let node: ClusterNode
    do {
        node = try ClusterNode(directory: arguments[0], node: arguments[1], leaseTTL: ttl) { event in
            switch event {
            case .directoryUp: say("up")
            case .directoryDown: say("down")
            case .published(let name): say("published \(name)")
            case .lost(let name, let owner): say("lost \(name) \(owner.node)")
            case .ownerChanged(let name, let owner): say("owner \(name) \(owner?.node ?? "-")")
            }
        }
    } catch {
        say("error \(error)")
        return 1
    }
    while let line = readLine() {
        let words = line.split(separator: " ").map(String.init)
        guard words.count == 2 else { continue }
        switch words[0] {
        case "publish":
            switch node.publish(words[1], owner: ClusterOwner(node: arguments[1], pid: getpid())) {
            case .published: say("publication \(words[1]) published")
            case .taken(let owner): say("publication \(words[1]) taken \(owner.node)")
            case .pending: say("publication \(words[1]) pending")
            }
        case "withdraw":
            node.withdraw(words[1])
            say("withdrawn \(words[1])")
        default:
            say("unknown \(line)")
        }
    }
    node.close()
    return 0
}
