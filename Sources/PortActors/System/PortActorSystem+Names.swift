import Distributed
import NamedPortServer
import PortKitLocks
import PortMessaging

extension PortActorSystem {
    /// Registers `actor` under `name`: `resolve(name:)` from any process of the host (and,
    /// with `.cluster` scope at a cluster's node, from other nodes) reaches it. The name
    /// keeps the actor alive until `unregister`, `shutDown` or the process's end; with a
    /// reconnecting name server client it is registered again after a server restart.
    /// - Returns: the registration, whose `state` says whether the name is held.
    /// - Throws: `names` with what `NameServerClient.register` throws (`nameTaken`,
    ///   `nameTakenElsewhere`, `invalidName`, `permissionDenied`, ...; `nameTaken` too for
    ///   a name this system holds for another actor); `noNameServer`, or `unknownActor`
    ///   for an actor not of this system.
    @discardableResult
    public func register<Act: DistributedActor>(
        _ actor: Act, as name: String, scope: NameScope = .host
    ) async throws(PortActorError) -> NameRegistration where Act.ID == ActorAddress {
        let names = try claim(actor, name)
        do {
            return try await names.register(name, port: port, scope: scope)
        } catch {
            release(name)
            throw .names(error)
        }
    }

    /// Registers `actor` under `name`, as `register(_:as:scope:)` does, blocking the
    /// calling thread until the server answers.
    @discardableResult
    public func blockingRegister<Act: DistributedActor>(
        _ actor: Act, as name: String, scope: NameScope = .host
    ) throws(PortActorError) -> NameRegistration where Act.ID == ActorAddress {
        let names = try claim(actor, name)
        do {
            return try names.blockingRegister(name, port: port, scope: scope)
        } catch {
            release(name)
            throw .names(error)
        }
    }

    /// Releases `name`: watchers of the actor's end by this name are told, and the actor
    /// is no longer kept alive by it.
    /// - Throws: `names` with what `NameServerClient.unregister` throws; `noNameServer`.
    public func unregister(_ name: String) async throws(PortActorError) {
        guard let names else { throw .noNameServer }
        release(name)
        do throws(NameServerError) {
            try await names.unregister(name)
        } catch {
            throw .names(error)
        }
    }

    /// The actor registered under `name`: a remote reference whose calls go to its
    /// process, or the actor itself if it lives in this process.
    /// - Parameters:
    ///   - name: the name.
    ///   - actorType: the actor's type.
    ///   - wait: how long to wait for the name to be registered: `.zero` (the default)
    ///     does not wait, `nil` waits as long as it takes.
    /// - Throws: `names` with what `NameServerClient.lookup` throws (`notFound`,
    ///   `waitTimedOut`, `permissionDenied`, ...); `notAnActor` when the name's port is not
    ///   a `PortActorSystem`'s, `unknownActor` when it no longer holds the name (or holds an
    ///   actor of another type), `transport(.peerDied)`; `noNameServer`.
    public func resolve<Act: DistributedActor>(
        name: String, as actorType: Act.Type = Act.self, waitingUpTo wait: Duration? = .zero
    ) async throws(PortActorError) -> Act where Act.ActorSystem == PortActorSystem {
        let id = try await connect(name, waitingUpTo: wait)
        do {
            return try Act.resolve(id: id, using: self)
        } catch {
            // `resolve(id:as:)`, the only thrower here, throws `unknownActor`.
            throw error as? PortActorError ?? .unknownActor(id)
        }
    }

    // MARK: Internals

    private func claim<Act: DistributedActor>(
        _ actor: Act, _ name: String
    ) throws(PortActorError) -> NameServerClient where Act.ID == ActorAddress {
        guard let names else { throw .noNameServer }
        let refusal = state.withLock { state -> PortActorError? in
            guard actor.id.isInThisProcess, state.locals[actor.id.id] != nil else { return .unknownActor(actor.id) }
            if let holder = state.named[name], holder != actor.id.id { return .names(.nameTaken(name: name, ownerPID: pid)) }
            state.named[name] = actor.id.id
            state.locals[actor.id.id]?.retained = actor
            state.locals[actor.id.id]?.names.insert(name)
            return nil
        }
        if let refusal { throw refusal }
        return names
    }

    private func release(_ name: String) {
        // Let go outside the lock: the actor's deinit resigns its id.
        let released = state.withLock { state -> (any DistributedActor)? in
            guard let id = state.named.removeValue(forKey: name) else { return nil }
            state.locals[id]?.names.remove(name)
            guard state.locals[id]?.names.isEmpty == true else { return nil }
            defer { state.locals[id]?.retained = nil }
            return state.locals[id]?.retained
        }
        withExtendedLifetime(released) {}
    }

    /// Looks `name` up and asks its system which actor holds it; the actor's address, with
    /// a route to it recorded unless it lives in this process.
    func connect(_ name: String, waitingUpTo wait: Duration? = .zero) async throws(PortActorError) -> ActorAddress {
        guard let names else { throw .noNameServer }
        let port: SendPort
        do throws(NameServerError) {
            port = try await names.lookup(name, waitingUpTo: wait)
        } catch {
            throw .names(error)
        }
        do throws(PortActorError) {
            let node = try? await names.owner(of: name).node
            // The replies to calls made through this route are read by the system's thread:
            // a call made by a task on that thread is resumed by the thread that reads its
            // reply, with no hand-off to another. (Should the thread stop before the
            // route closes, the process's shared reply loop reads on.)
            do { try port.readReplies(on: loop) } catch { throw PortActorError(error) }
            let reply: Message
            do {
                reply = try await port.request(Message(id: ActorMessageKind.describe.rawValue, text: name), receiveTimeout: names.timeout)
            } catch .noReply {
                throw .notAnActor(name: name)
            } catch {
                throw PortActorError(error)
            }
            var reader = BinaryReader(reply.bytes)
            guard reply.componentCount == 1, let status = try? reader.byte() else { throw PortActorError.notAnActor(name: name) }
            guard status == ReplyStatus.value.rawValue else { throw PortActorError.notAnActor(name: name) }
            let id = try reader.fixed(UInt64.self)
            let pid = Int32(bitPattern: try reader.fixed(UInt32.self))
            let address = ActorAddress(name: name, node: node, pid: pid, id: id)
            if address.isInThisProcess, localActor(id) != nil {
                port.invalidate()
            } else {
                record(RemoteRoute(address: address, port: port))
            }
            return address
        } catch {
            port.invalidate()
            throw error
        }
    }

    /// Keeps `route` for calls to its actor, and ends it when its connection does.
    private func record(_ route: RemoteRoute) {
        let replaced = state.withLock { state -> RemoteRoute? in
            if let kept = state.routes[route.address], !kept.hasEnded { return route }
            state.routes[route.address] = route
            return nil
        }
        // A route to the same actor that still works is kept: the new connection goes.
        if let replaced { return replaced.port.invalidate() }
        let ending = Unretained(route)
        try? route.port.onInvalidation(on: loop) { _ in ending.object?.ended() }
    }

    /// The route calls to `id` take: the one recorded, else one found by its name.
    /// - Throws: `PortActorError.transport(.peerDied)` when the actor's process has gone (or its name
    ///   now leads to another actor), `unknownActor` for an address with no route and no
    ///   name, and what a lookup throws.
    nonisolated(nonsending) func route(to id: ActorAddress) async throws(PortActorError) -> RemoteRoute {
        let (route, shutDown) = state.withLock { ($0.routes[id], $0.isShutDown) }
        if shutDown { throw .systemShutDown }
        if let route {
            guard !route.hasEnded else { throw .transport(.peerDied) }
            return route
        }
        guard let name = id.name, names != nil else { throw .unknownActor(id) }
        let found = try await connect(name)
        guard found == id, let route = state.withLock({ $0.routes[id] }) else { throw .transport(.peerDied) }
        return route
    }
}
