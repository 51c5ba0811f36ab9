import Distributed
import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitLocks

extension PortActorSystem {
    /// Calls `handler` once the remote actor `actor` ends, as Binder's `linkToDeath`: when
    /// its process exits or is killed (its connection closes; seen within one pass of the
    /// system's loop), or when the name it was found by is released by its holder. At once
    /// if it has ended already.
    ///
    /// A name released while the name server restarts counts as an end only if the holder
    /// has not registered it again by the time the watch resumes.
    /// - Throws: `PortActorError.unknownActor` for an actor this system has no route to
    ///   (one of this process, or not found through this system).
    public func whenTerminated<Act: DistributedActor>(
        _ actor: Act, perform handler: @escaping @Sendable (ActorAddress) -> Void
    ) throws(PortActorError) where Act.ID == ActorAddress {
        guard let route = state.withLock({ $0.routes[actor.id] }) else { throw .unknownActor(actor.id) }
        route.whenEnded(handler)
        if !route.port.isValid { route.ended() }
        watchName(of: route)
    }

    /// Suspends until the remote actor `actor` ends (see `whenTerminated(_:perform:)`);
    /// its address.
    /// - Throws: `PortActorError.unknownActor` as `whenTerminated` does.
    public func terminated<Act: DistributedActor>(_ actor: Act) async throws(PortActorError) -> ActorAddress where Act.ID == ActorAddress {
        guard let route = state.withLock({ $0.routes[actor.id] }) else { throw .unknownActor(actor.id) }
        return await withCheckedContinuation { continuation in
            route.whenEnded { continuation.resume(returning: $0) }
            if !route.port.isValid { route.ended() }
            watchName(of: route)
        }
    }

    /// Watches the name `route`'s actor was found by, once per route: its release ends the
    /// route. The watch is an async one, its events handed over by the process's reply loop.
    private func watchName(of route: RemoteRoute) {
        guard let names, let name = route.address.name else { return }
        let watch = Locked<NameWatch?>(nil)
        let task = Locked<Task<Void, Never>?>(nil)
        guard route.startWatch({
            task.withLock { $0 }?.cancel()
            watch.withLock { $0 }?.cancel()
        }) else { return }
        let address = route.address
        // Not `[weak route]`: see `Unretained`. Read at each use, so the watch does not
        // keep the route alive.
        let watched = Unretained(route)
        let started = Task {
            guard let made = try? await names.watch(name: name) else { return }
            watch.withLock { $0 = made }
            if watched.object?.hasEnded ?? true { return made.cancel() }
            do {
                for try await event in made {
                    if case .vanished(let owner) = event, owner.pid == address.pid, owner.node == address.node {
                        watched.object?.ended()
                        return
                    }
                }
            } catch {}
        }
        task.withLock { $0 = started }
    }
}
