import PermanentThread
import PortMessaging
import PortKitLocks

/// A node's ports to names held on other nodes, for the programs of its own host: each a
/// `ReceivePort` in this process relaying to one connection to the owner's gateway
/// (`ClusterNode.connect(toName:security:timeout:)`), shared by every local caller of the
/// name. A name server of the node hands them out for lookups of remote names
/// (`NameDirectory.remotePort(for:completion:)`), so a program that links nothing but
/// `NamedPortServer` reaches a name on another host as it reaches one here.
///
/// They work on a thread of their own (`portkit.cluster-relay`, started with the first),
/// where connecting happens too: neither a name server's loop nor the node's directory
/// thread waits on another host. When the owner's gateway hangs up (the owner died, its
/// node went), the relay ends: every local caller's port fails with `PortError.peerDied`,
/// and the next lookup connects afresh.
final class RemoteRelays: Sendable {
    private struct State {
        var thread: PermanentThread?
        var relays: [String: ReceivePort] = [:]
        var security: TCPSecurity?
        var closed = false
    }

    private let state = Locked(State())

    /// How connections to other nodes' gateways are protected; `nil` (the default): names
    /// on other nodes are not looked up through this node.
    var security: TCPSecurity? {
        get { state.withLock { $0.security } }
        set { state.withLock { $0.security = newValue } }
    }

    /// Calls `completion` with a port relaying to `name`'s owner on another node (made by
    /// `connect` on the relays' thread, once per name while it lasts), or `nil`.
    func port(for name: String, connect: @escaping @Sendable (TCPSecurity) -> SendPort?, completion: @escaping @Sendable (SendPort?) -> Void) {
        guard let (thread, security) = threadAndSecurity() else { return completion(nil) }
        do {
            try thread.execute(label: "cluster relay \(name)") { [self] in
                completion(relay(for: name, on: thread, connect: { connect(security) })?.makeSendPort())
            }
        } catch {
            completion(nil)
        }
    }

    /// Ends every relay (callers' ports fail with `peerDied`) and the relays' thread.
    func close() {
        let (thread, relays) = state.withLock { state -> (PermanentThread?, [ReceivePort]) in
            state.closed = true
            defer { state.relays = [:]; state.thread = nil }
            return (state.thread, Array(state.relays.values))
        }
        for relay in relays { relay.invalidate() }
        thread?.stop()
    }

    /// The relays' thread (started now if need be) and the security, unless closed or
    /// not asked for.
    private func threadAndSecurity() -> (PermanentThread, TCPSecurity)? {
        state.withLock { state -> (PermanentThread, TCPSecurity)? in
            guard !state.closed, let security = state.security else { return nil }
            if let thread = state.thread { return (thread, security) }
            let thread = PermanentThread(name: "portkit.cluster-relay")
            guard (try? thread.run()) != nil else { return nil }
            state.thread = thread
            return (thread, security)
        }
    }

    /// On the relays' thread: the relay of `name`, kept, or made with a new connection.
    private func relay(for name: String, on thread: PermanentThread, connect: () -> SendPort?) -> ReceivePort? {
        if let kept = state.withLock({ $0.relays[name] }), kept.isValid { return kept }
        guard let loop = thread.loop, let target = connect() else { return nil }
        let relay = ReceivePort()
        do throws(PortError) {
            try target.readReplies(on: loop)
            try relay.schedule(on: loop, deferringReplies: { message, reply in
                PortForwarding.forward(message, reply: reply, to: target) { message.peer?.disconnect() }
            })
            try target.onInvalidation(on: loop) { [weak self, weak relay] _ in
                guard let relay else { return }
                self?.state.withLock { state in if state.relays[name] === relay { state.relays[name] = nil } }
                relay.invalidate()
            }
        } catch {
            relay.invalidate()
            target.invalidate()
            return nil
        }
        // The relay holds the connection for as long as it lives.
        relay.onInvalidation { _ in target.invalidate() }
        state.withLock { $0.relays[name] = relay }
        return relay
    }
}
