import PortMessaging

/// Why a port to a name on another node could not be had.
public enum ClusterConnectError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No node holds the name (as the node's mirror of the directory says).
    case noSuchName(String)
    /// The name's node takes no connections from other hosts (its `portnamed` runs without
    /// `--listen`), or names an address that is not `HOST:PORT`.
    case notReachable(name: String, owner: ClusterOwner)
    /// The owner's node answered, and refused: the name has no owner there any more (it
    /// died, or the name moved meanwhile), or the node did not understand the request.
    case refused(name: String, owner: ClusterOwner, reason: String)
    /// Connecting to the owner's node failed: `.unreachable`, `.noListener`,
    /// `.plainTCPRefused`, a failed handshake, `.receiveTimedOut`.
    case connection(name: String, owner: ClusterOwner, PortError)

    /// What went wrong, in a sentence.
    public var description: String {
        switch self {
        case .noSuchName(let name): "no node holds \(name)"
        case .notReachable(let name, let owner):
            "\(name) is held by \(owner), whose node takes no connections from other hosts"
        case .refused(let name, let owner, let reason): "node \(owner.node) refused a connection to \(name): \(reason)"
        case .connection(let name, let owner, let error): "cannot reach \(name) on node \(owner.node) (\(owner.address)): \(error)"
        }
    }
}

extension ClusterNode {
    /// A port to `name`'s owner on whichever node holds it: a connection to that node's
    /// gateway (`ClusterGateway`), over TCP protected as `security` says, relaying to the
    /// owner. Bytes and requests with their replies travel; descriptors and ports do not
    /// (`PortError.cannotCrossHosts`). When the owner dies, the port fails with
    /// `PortError.peerDied`.
    ///
    /// The owner is found in the node's mirror of the directory, so a name published a
    /// moment ago on another node may not be known here yet (`noSuchName`): wait for the
    /// node's `ClusterEvent.ownerChanged`, or try again.
    /// - Parameters:
    ///   - name: the name.
    ///   - security: how the connection is protected (the owner's node must use the same).
    ///   - timeout: how long connecting and opening the name may take in all.
    /// - Throws: `ClusterConnectError`.
    public func connect(toName name: String, security: TCPSecurity, timeout: Duration = .seconds(10)) throws(ClusterConnectError) -> SendPort {
        guard let owner = owner(of: name) else { throw .noSuchName(name) }
        guard let address = PortAddress(tcp: owner.address) else { throw .notReachable(name: name, owner: owner) }
        let deadline = ContinuousClock.now + timeout
        let port: SendPort
        let reply: Message
        do throws(PortError) {
            port = try SendPort.connect(to: address, security: security, timeout: timeout)
            reply = try port.blockingRequest(GatewayWire.open(name), sendTimeout: deadline - .now, receiveTimeout: deadline - .now)
        } catch {
            throw .connection(name: name, owner: owner, error)
        }
        guard let (status, detail) = GatewayWire.status(of: reply) else {
            port.invalidate()
            throw .refused(name: name, owner: owner, reason: "its answer is not a gateway's")
        }
        guard status == .opened else {
            port.invalidate()
            throw .refused(name: name, owner: owner, reason: detail)
        }
        return port
    }
}

extension ClusterNode {
    /// Lets this node hand out ports to names held on other nodes, connecting to their
    /// gateways protected as `security` says: a lookup at this node's name server of a
    /// name another node holds then gives a port in the server's process that relays to
    /// the owner (`remotePort(for:completion:)`). Off until asked for.
    public func reachOtherNodes(security: TCPSecurity) {
        remotes.security = security
    }

    /// Calls `completion` with a port relaying to `name`'s owner on another node, or
    /// `nil` when no other node holds it, it cannot be reached, or `reachOtherNodes` was
    /// not called: what a name server of this node answers a lookup of a remote name
    /// with (`NameDirectory`). Returns at once; connecting happens on the node's relay
    /// thread, once per name while its connection lasts, shared by every caller here.
    public func remotePort(for name: String, completion: @escaping @Sendable (SendPort?) -> Void) {
        guard holder(of: name) != nil else { return completion(nil) }
        remotes.port(for: name, connect: { [self] security in try? connect(toName: name, security: security, timeout: .seconds(5)) }, completion: completion)
    }
}
