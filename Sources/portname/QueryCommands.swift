import NamedPortServer
import PortCluster

/// `list`, `lookup` and `status`: one question to the server, its answer printed.
enum QueryCommands {
    static func list(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.isEmpty else { throw .usage("list takes no arguments", verb: .list) }
        if options.flags.contains("--activatable") { return try listActivatable(options, address: address) }
        if let endpoint = options.values["--cluster"] { return try listCluster(options, endpoint: endpoint) }
        let client = try connect(address)
        do {
            for owner in try client.blockingList() {
                say(options.wantsJSON ? JSONLine(owner).text : owner.description)
            }
        } catch {
            throw Exit(error)
        }
    }

    /// `list --activatable`: the names the server's service files declare.
    private static func listActivatable(_ options: Options, address: String?) throws(Exit) {
        guard options.values["--cluster"] == nil else { throw .usage("--activatable and --cluster exclude each other", verb: .list) }
        let client = try connect(address)
        do {
            for name in try client.blockingActivatableNames() {
                var line = JSONLine()
                line.add("name", name)
                say(options.wantsJSON ? line.text : name)
            }
        } catch {
            throw Exit(error)
        }
    }

    /// `list --cluster URL`: every name in the cluster's directory, with its node and pid.
    private static func listCluster(_ options: Options, endpoint: String) throws(Exit) {
        let files = ["--tls-cert", "--tls-key", "--tls-ca"].map { options.values[$0] }
        var security: ClusterTLS?
        if let certificate = files[0], let key = files[1], let authority = files[2] {
            do { security = try ClusterTLS(certificate: certificate, privateKey: key, authority: authority) } catch {
                throw Exit(status: 1, message: "\(error)")
            }
        } else if files.contains(where: { $0 != nil }) {
            throw .usage("--tls-cert, --tls-key and --tls-ca go together", verb: .list)
        }
        let entries: [DirectoryEntry]
        do {
            entries = try EtcdClient(endpoint: endpoint, security: security).list(prefix: ClusterNode.defaultPrefix).entries
        } catch .invalidEndpoint {
            throw .usage(
                "--cluster needs an etcd endpoint http://HOST:PORT, or https://HOST:PORT with --tls-cert, --tls-key and --tls-ca, not '\(endpoint)'",
                verb: .list)
        } catch {
            throw Exit(status: 5, message: "\(error)")
        }
        for entry in entries {
            guard let owner = ClusterOwner(directoryValue: entry.value) else { continue }
            let name = String(entry.key.dropFirst(ClusterNode.defaultPrefix.count))
            if options.wantsJSON {
                var line = JSONLine()
                line.add("name", name)
                line.add("node", owner.node)
                line.add("pid", Int(owner.pid))
                say(line.text)
            } else {
                say("\(name)\t\(owner.node)\t\(owner.pid)")
            }
        }
    }

    static func lookup(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.count == 1 else { throw .usage("lookup takes one NAME", verb: .lookup) }
        let wait = try options.seconds("--wait", verb: .lookup)
        let name = try validName(options.positional[0])
        let client = try connect(address)
        do {
            let owner = try client.blockingOwner(of: name, waitingUpTo: wait ?? .zero)
            // A name on another node of a cluster: its owner's pid there, and the node.
            say(options.wantsJSON ? JSONLine(owner).text : "\(owner.pid)" + (owner.node.map { "\t\($0)" } ?? ""))
        } catch .waitTimedOut {
            // For a script, a name that did not come in time is a name not found.
            throw Exit(status: 1, message: "no port was registered as '\(name)' within \(wait ?? .zero)")
        } catch {
            throw Exit(error)
        }
    }

    static func status(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.isEmpty else { throw .usage("status takes no arguments", verb: .status) }
        let client = try connect(address)
        let status: NameServerStatus
        do {
            status = try client.status()
        } catch {
            throw Exit(error)
        }
        let uptime = Double(status.uptime.components.seconds) + Double(status.uptime.components.attoseconds) / 1e18
        let rounded = (uptime * 1000).rounded() / 1000
        var json = JSONLine()
        json.add("address", client.address)
        json.add("pid", Int(status.pid))
        json.add("uptime", rounded)
        json.add("connections", status.connections)
        json.add("names", status.names)
        json.add("watches", status.watches)
        json.add("waiting_lookups", status.waitingLookups)
        json.add("refused_connections", status.refusedConnections)
        json.add("refused_requests", status.refusedRequests)
        guard !options.wantsJSON else { return say(json.text) }
        say("""
            address: \(client.address)
            pid: \(status.pid)
            uptime: \(rounded)
            connections: \(status.connections)
            names: \(status.names)
            watches: \(status.watches)
            waiting_lookups: \(status.waitingLookups)
            refused_connections: \(status.refusedConnections)
            refused_requests: \(status.refusedRequests)
            """)
    }
}
