import Distributed
import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging
import Synchronization
import PortKitLocks

/// A `DistributedActorSystem` over PortKit's ports: `distributed actor`s called from other
/// threads, processes and (through a cluster's gateway) hosts, found by name through the
/// name server.
///
/// A system is one `ReceivePort` scheduled on a `PermanentThread`'s loop. A call to one of
/// its actors arrives there as a request (or, for a `Void`, non-throwing target, as a
/// one-way message); the port's handler decodes which actor and target, and queues the
/// call's task on the actor's thread (else the system's) before it takes the next, so
/// calls from one caller start in the order they were made. The reply goes back through
/// the request's `PendingReply` when the call ends. See docs/ACTORS.md.
///
/// ```swift
/// let system = try PortActorSystem(nameServerAt: address)
/// let greeter = Greeter(actorSystem: system)
/// try await system.register(greeter, as: "greeter")
/// // In another process:
/// let remote = try await system.resolve(name: "greeter", as: Greeter.self)
/// print(try await remote.greet("Ada"))
/// ```
public final class PortActorSystem: DistributedActorSystem, Sendable {
    /// An actor's identity is its address.
    public typealias ActorID = ActorAddress
    /// Encodes calls.
    public typealias InvocationEncoder = PortInvocationEncoder
    /// Decodes received calls.
    public typealias InvocationDecoder = PortInvocationDecoder
    /// Sends results back.
    public typealias ResultHandler = PortResultHandler
    /// Arguments, results and thrown errors that travel are `Codable`.
    public typealias SerializationRequirement = any Codable

    /// The name server client names are registered and looked up with, if any.
    public let names: NameServerClient?
    /// The thread whose loop serves the system's port.
    public let thread: PermanentThread
    /// How long a call waits for its result once sent; `nil`: as long as the actor's
    /// process lives.
    public let callTimeout: Duration?
    /// How long a call waits for room to be sent when the actor's process reads slowly.
    public let sendTimeout: Duration?
    /// Whether calls of `Void`, non-throwing targets are sent one-way, without waiting
    /// for the actor to run them.
    public let sendsVoidCallsOneWay: Bool

    let port = ReceivePort()
    let loop: ThreadLoop
    let pid = getpid()
    private let ownsThread: Bool
    let state = Locked(State())
    /// Call ids start at a random point, so those of the systems calling one actor do not
    /// meet (a cancel names its call by id and the connection it came over).
    private let callIDs = Atomic<UInt64>(UInt64.random(in: 1..<(1 << 62)))

    struct State {
        var locals: [LocalID: LocalActor] = [:]
        /// The permanent threads that are actors' executors (`run(_:on:)`), as the task
        /// executors their calls prefer.
        var threads: [LocalID: PermanentThread] = [:]
        var named: [String: UInt64] = [:]
        var routes: [ActorAddress: RemoteRoute] = [:]
        var calls: [CallKey: RunningCall] = [:]
        var isShutDown = false
    }

    /// An actor of this system: not kept alive (`Unretained`, not `weak`, which would slow
    /// every retain of the actor), unless a name keeps it.
    ///
    /// A class, so that finding a served call's actor copies one reference out of the
    /// table, not the record's three.
    // Safety of @unchecked Sendable: read and changed only under the system's state lock.
    final class LocalActor: @unchecked Sendable {
        let reference: any UnretainedActor
        var retained: (any DistributedActor)?
        var names: Set<String> = []

        init(reference: any UnretainedActor) {
            self.reference = reference
        }

        /// The actor, while it lives.
        var actor: (any DistributedActor)? { reference.actor }
    }

    /// Makes a system whose port is served on `thread`'s loop (a thread of its own, named
    /// `portactors`, if `nil`; a given one is started if it is not running).
    /// - Parameters:
    ///   - thread: the thread whose loop receives calls.
    ///   - names: the name server client to register and look up names with; `nil` for
    ///     a system whose actors are reached otherwise.
    ///   - callTimeout: how long a call waits for its result; `nil` (the default) as long
    ///     as the actor's process lives.
    ///   - sendTimeout: how long a call waits for room to be sent (10 s by default).
    ///   - sendsVoidCallsOneWay: send calls of `Void`, non-throwing targets without
    ///     waiting for them (the default).
    /// - Throws: `thread` when the thread cannot start or has stopped, `transport` when its
    ///   loop refuses the system's port.
    public convenience init(
        thread: PermanentThread? = nil, names: NameServerClient? = nil, callTimeout: Duration? = nil,
        sendTimeout: Duration? = SendPort.defaultTimeout, sendsVoidCallsOneWay: Bool = true
    ) throws(PortActorError) {
        try self.init(
            thread: thread ?? PermanentThread(name: "portactors"), ownsThread: thread == nil, names: names,
            callTimeout: callTimeout, sendTimeout: sendTimeout, sendsVoidCallsOneWay: sendsVoidCallsOneWay)
    }

    init(
        thread: PermanentThread, ownsThread: Bool, names: NameServerClient?, callTimeout: Duration?, sendTimeout: Duration?,
        sendsVoidCallsOneWay: Bool
    ) throws(PortActorError) {
        self.thread = thread
        self.ownsThread = ownsThread
        do throws(PermanentThreadError) { try thread.run() } catch { throw .thread(error) }
        guard let loop = self.thread.loop else { throw .thread(.stopped) }
        self.loop = loop
        self.names = names
        self.callTimeout = callTimeout
        self.sendTimeout = sendTimeout
        self.sendsVoidCallsOneWay = sendsVoidCallsOneWay
        do throws(PortError) {
            // Not `[weak self]`: see `Unretained`.
            let system = Unretained(self)
            try port.schedule(on: loop, deferringReplies: { message, reply in
                system.object?.receive(message, reply: reply)
            })
        } catch {
            throw .transport(error)
        }
    }

    /// Makes a system with a name server client of its own, connected to the server at
    /// `address` (the default address if `nil`) and reconnecting on the system's loop: its
    /// actors' names are registered again after the server restarts.
    /// - Throws: `names` with what `NameServerClient.blockingConnect` throws, and what
    ///   `init(thread:names:callTimeout:sendTimeout:sendsVoidCallsOneWay:)` throws.
    public convenience init(
        nameServerAt address: String?, thread: PermanentThread? = nil, callTimeout: Duration? = nil,
        startingServerIfNeeded: Bool = false
    ) throws(PortActorError) {
        let given = thread
        let thread = thread ?? PermanentThread(name: "portactors")
        do throws(PermanentThreadError) { try thread.run() } catch { throw .thread(error) }
        let names: NameServerClient
        do throws(NameServerError) {
            names = try NameServerClient.blockingConnect(
                to: address, startingServerIfNeeded: startingServerIfNeeded, reconnectingOn: thread.loop)
        } catch {
            if given == nil { thread.stop() }
            throw .names(error)
        }
        do throws(PortActorError) {
            try self.init(
                thread: thread, ownsThread: given == nil, names: names, callTimeout: callTimeout,
                sendTimeout: SendPort.defaultTimeout, sendsVoidCallsOneWay: true)
        } catch {
            names.close()
            if given == nil { thread.stop() }
            throw error
        }
    }

    /// Stops the system: its name server client is closed (given or made, so its names are
    /// released), calls it runs are cancelled, its routes to other actors and its port
    /// close (its callers see `transport(.peerDied)`), and a thread it made stops. Safe more than once.
    public func shutDown() {
        // Actors a name kept are let go outside the lock: their deinit resigns their id.
        let (calls, routes, released) = state.withLock { state -> ([RunningCall], [RemoteRoute], [any DistributedActor]) in
            guard !state.isShutDown else { return ([], [], []) }
            state.isShutDown = true
            var released: [any DistributedActor] = []
            for key in state.locals.keys {
                if let actor = state.locals[key]?.retained { released.append(actor) }
                state.locals[key]?.retained = nil
            }
            defer {
                state.calls = [:]
                state.routes = [:]
                state.named = [:]
            }
            return (Array(state.calls.values), Array(state.routes.values), released)
        }
        withExtendedLifetime(released) {}
        for call in calls { call.cancel() }
        for route in routes { route.close() }
        names?.close()
        port.invalidate()
        if ownsThread { thread.stop() }
    }

    // MARK: DistributedActorSystem

    /// A new address in this process.
    public func assignID<Act: DistributedActor>(_ actorType: Act.Type) -> ActorAddress where Act.ID == ActorAddress {
        ActorAddress(pid: pid, id: actorIDs.add(1, ordering: .relaxed).newValue)
    }

    /// Records a new actor of this system, which calls can now reach.
    public func actorReady<Act: DistributedActor>(_ actor: Act) where Act.ID == ActorAddress {
        state.withLock { $0.locals[actor.id.id] = LocalActor(reference: Unretained(actor)) }
    }

    /// Forgets an actor that went away.
    public func resignID(_ id: ActorAddress) {
        state.withLock { state in
            guard id.pid == pid, id.node == nil else { return }
            state.locals[id.id] = nil
            state.threads[id.id] = nil
        }
    }

    /// The actor of this system at `id`, or `nil` for an actor elsewhere (another process,
    /// or another system of this process: the caller then makes a remote reference, which
    /// calls travel through).
    /// - Throws: `PortActorError.unknownActor` for an actor of this system of another type.
    public func resolve<Act: DistributedActor>(id: ActorAddress, as actorType: Act.Type) throws -> Act? where Act.ID == ActorAddress {
        guard id.isInThisProcess, let actor = localActor(id.id) else { return nil }
        guard let typed = actor as? Act else { throw PortActorError.unknownActor(id) }
        return typed
    }

    /// A new invocation encoder for a call.
    public func makeInvocationEncoder() -> PortInvocationEncoder {
        PortInvocationEncoder(system: self)
    }

    /// The local actor with this id, if it lives.
    func localActor(_ id: UInt64) -> (any DistributedActor)? {
        state.withLock { $0.locals[id]?.actor }
    }

    /// A fresh call id.
    func nextCallID() -> UInt64 {
        callIDs.add(1, ordering: .relaxed).newValue
    }
}

/// The key of a local actor in a system's tables: its id (`ActorAddress.id`).
///
/// Hashed with one multiplication instead of the standard library's SipHash: a served call
/// looks its actor up two or three times (the actor, its thread, its executor). The keys
/// stored are ids this process hands out, one after another; a peer names one in a call,
/// but looking a key up never adds one, so a hash that resists chosen keys buys nothing.
struct LocalID: Hashable {
    let raw: UInt64

    init(_ raw: UInt64) { self.raw = raw }

    func hash(into hasher: inout Hasher) { hasher.combine(raw) }

    // Dictionary asks this, not `hash(into:)`.
    func _rawHashValue(seed: Int) -> Int { multiplicativeHash(raw, seed: seed) }
}

extension Dictionary where Key == LocalID {
    /// The value for the local actor `id`.
    subscript(id: UInt64) -> Value? {
        get { self[LocalID(id)] }
        set { self[LocalID(id)] = newValue }
    }
}

/// Actor ids are unique in the process, not only in their system: an address then tells
/// an actor of this system from one of another system of the same process.
private let actorIDs = Atomic<UInt64>(0)

extension PortActorSystem {
    /// Makes `thread` the serial executor of the actor `id` of this system: its calls run
    /// on that thread, one at a time, in order with the blocks and timers of its loop, so
    /// the actor and the worker thread are one. Called from the actor's initializer, once
    /// its `actorSystem` is set, with `unownedExecutor` answering `executor(for: id)`:
    ///
    /// ```swift
    /// distributed actor Librarian {
    ///     typealias ActorSystem = PortActorSystem
    ///     init(actorSystem: PortActorSystem, thread: PermanentThread) {
    ///         self.actorSystem = actorSystem
    ///         actorSystem.run(id, on: thread)
    ///     }
    ///     nonisolated var unownedExecutor: UnownedSerialExecutor { actorSystem.executor(for: id) }
    /// }
    /// ```
    ///
    /// (A distributed actor cannot read its own stored properties from a nonisolated
    /// member, since a remote reference has none: the system keeps the thread instead.)
    public func run(_ id: ActorAddress, on thread: PermanentThread) {
        state.withLock { $0.threads[id.id] = thread }
    }

    /// The serial executor of the actor `id`: the permanent thread given to
    /// `run(_:on:)`, else the system's own thread.
    public func executor(for id: ActorAddress) -> UnownedSerialExecutor {
        (state.withLock { $0.threads[id.id] } ?? thread).asUnownedSerialExecutor()
    }
}
