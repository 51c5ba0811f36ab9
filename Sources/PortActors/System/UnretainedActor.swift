import PortKitLocks

/// A local actor, without keeping it alive: what a system's table of actors holds.
protocol UnretainedActor: Sendable {
    /// The actor, while it lives.
    var actor: (any DistributedActor)? { get }
}

extension Unretained: UnretainedActor where Object: DistributedActor {
    var actor: (any DistributedActor)? { object }
}
