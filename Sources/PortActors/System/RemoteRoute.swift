import PermanentThread
import PortMessaging
import PortKitLocks
import Synchronization

/// How calls reach an actor of another process: a send port to its system's port (the
/// connection a lookup of its name brokered), with whom to tell when it ends.
final class RemoteRoute: Sendable {
    let address: ActorAddress
    let port: SendPort
    /// Handlers waiting for the actor's end, and whether it has ended.
    private let watchers = Locked<(ended: Bool, handlers: [@Sendable (ActorAddress) -> Void], watch: (@Sendable () -> Void)?)>(
        (false, [], nil))

    init(address: ActorAddress, port: SendPort) {
        self.address = address
        self.port = port
    }

    /// Whether the actor's process is known to have gone (or its name released).
    var hasEnded: Bool { watchers.withLock { $0.ended } || !port.isValid }

    /// Runs `handler` once the actor ends (at once if it has).
    func whenEnded(_ handler: @escaping @Sendable (ActorAddress) -> Void) {
        let now = watchers.withLock { state -> Bool in
            if !state.ended { state.handlers.append(handler) }
            return state.ended
        }
        if now { handler(address) }
    }

    /// Whether a name watch is set up for the route; sets `cancel` as the way to end it.
    func startWatch(_ cancel: @escaping @Sendable () -> Void) -> Bool {
        watchers.withLock { state -> Bool in
            guard state.watch == nil, !state.ended else { return false }
            state.watch = cancel
            return true
        }
    }

    /// The actor ended: its watchers are told, once.
    func ended() {
        let (handlers, watch) = watchers.withLock { state -> ([@Sendable (ActorAddress) -> Void], (@Sendable () -> Void)?) in
            guard !state.ended else { return ([], nil) }
            state.ended = true
            defer { state.handlers = []; state.watch = nil }
            return (state.handlers, state.watch)
        }
        watch?()
        for handler in handlers { handler(address) }
    }

    /// Closes the connection and ends the route.
    func close() {
        port.invalidate()
        ended()
    }
}

/// A call the system runs for a caller: its task, to cancel it when the caller asks.
///
/// Its lock is a `Mutex`, stored in the object: one allocation per call, not three.
final class RunningCall: Sendable {
    private let task = Mutex<(task: Task<Void, Never>?, cancelled: Bool)>((nil, false))

    /// Sets the call's task (cancelling it at once if the caller already asked).
    func started(_ task: Task<Void, Never>) {
        let cancel = self.task.withLock { state -> Bool in
            state.task = task
            return state.cancelled
        }
        if cancel { task.cancel() }
    }

    /// Cancels the call's task.
    func cancel() {
        let task = self.task.withLock { state -> Task<Void, Never>? in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }
}

/// A running call, by the connection it came over (0 in-process) and the caller's id.
struct CallKey: Hashable {
    var peer: UInt64
    var call: UInt64
}
