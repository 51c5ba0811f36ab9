import Glibc
import NameDaemon
import NamedPortServer
import PermanentThread
import PortCluster
import PortMessaging
import PortKitLocks

/// `portnamed --etcd URL --node NAME`: the node's link to the cluster. Every name
/// registered at this server with `.cluster` scope is published in the directory (on the
/// node's lease) as it is registered, and withdrawn as it is released (the node is the
/// server's `NameDirectory`, which the server tells); what the directory says back is
/// logged.
///
/// The server refuses a cluster name the node's mirror says another node holds. Publishing follows the local registration and never holds up the
/// server's thread: a name claimed elsewhere in the same instant stays registered here,
/// for this host only, and is logged as a warning.
///
/// With `--listen`, the node's gateway (`ClusterGateway`) takes connections from other
/// hosts for the cluster names held here (a host name is refused), relaying each to its
/// owner's port, which it looks up at this very server; the names are published with the
/// gateway's address. A lookup at this server of a name held on another node is answered
/// with a port relaying to that node's gateway.
struct ClusterLink: DaemonCluster {
    let node: ClusterNode
    let gateway: ClusterGateway?
    /// The server's address, once it listens: where the gateway looks names up.
    let serverAddress = Locked<String?>(nil)

    /// Joins the directory at `endpoint` as `nodeName`, logging to `log`; with `listen`,
    /// runs the gateway there (its callers held to the default `GatewayLimits`).
    /// Connections between nodes are TLS with `tls`, else plain TCP (loopback only); so
    /// are the connections to an `https://` directory.
    /// - Throws: `DirectoryError.invalidEndpoint`; the gateway's `PortError` (an address
    ///   in use, plain TCP on an address that is not loopback).
    init(endpoint: String, nodeName: String, leaseTTL: Int, listen: PortAddress?, tls: ClusterTLS?, log: DaemonLog) throws {
        // An https:// directory is reached with the node's own certificate, from the same
        // authority as etcd's.
        node = try ClusterNode(directory: endpoint, directorySecurity: tls, node: nodeName, leaseTTL: leaseTTL) { event in
            switch event {
            case .directoryUp: log.line(.notice, "cluster: the directory at \(endpoint) answers; node \(nodeName) publishes its names")
            case .directoryDown(let error): log.line(.warning, "cluster: \(error); names here keep working, and are published when it is back")
            case .published(let name): log.line(.info, "cluster: published \(name)")
            case .lost(let name, let owner): log.line(.warning, "cluster: \(name) is held by \(owner); it is registered on this node only")
            case .ownerChanged(let name, let owner): log.line(.debug, "cluster: \(name) \(owner.map { "held by \($0)" } ?? "released")")
            }
        }
        let security: TCPSecurity = tls.map { .secured(by: $0) } ?? .plainLoopbackOnly
        // A lookup here of a name held on another node gets a port relaying to its owner.
        node.reachOtherNodes(security: security)
        if let listen {
            let serverAddress = self.serverAddress
            let node = self.node
            let made = try ClusterGateway(listeningAt: listen, security: security) { name in
                // Only the names this node published: a host name is not for other hosts.
                guard node.holdsForCluster(name), let address = serverAddress.withLock({ $0 }) else { return nil }
                return try? NameServerClient.blockingConnect(to: address).blockingLookup(name)
            }
            node.advertise(gatewayAddress: "\(made.address)")
            gateway = made
        } else {
            gateway = nil
        }
    }

    // MARK: DaemonCluster

    var directory: any NameDirectory { node }
    var gatewayAddress: String? { gateway.map { "\($0.address)" } }

    func serverListens(at address: String) { serverAddress.withLock { $0 = address } }

    func close() {
        gateway?.close()
        node.close()
    }

    /// Starts cluster mode for `options` (which have `--etcd`), logging to `log`; exits with
    /// status 2 for options the directory refuses (an endpoint that is not one), 1 when
    /// the node's certificate or the gateway cannot be used.
    static func start(_ options: DaemonOptions, log: DaemonLog) -> any DaemonCluster {
        guard let etcd = options.etcd, let node = options.node else {
            DaemonLog(level: .warning).failure("--etcd needs --node\n(see 'portnamed --help')")
            exit(2)
        }
        do {
            var tls: ClusterTLS?
            if let certificate = options.tlsCertificate, let key = options.tlsKey, let authority = options.tlsAuthority {
                do { tls = try ClusterTLS(certificate: certificate, privateKey: key, authority: authority) } catch {
                    log.failure("cannot use the node's certificate: \(error)")
                    exit(1)
                }
            }
            return try ClusterLink(endpoint: etcd, nodeName: node, leaseTTL: options.leaseTTL, listen: options.listen, tls: tls, log: log)
        } catch let error as DirectoryError {
            DaemonLog(level: .warning).failure("\(error)\n(see 'portnamed --help')")
            exit(2)
        } catch {
            log.failure("cannot take connections from other hosts: \(error)")
            exit(1)
        }
    }
}
