import PermanentThread
import PortKitLocks

/// The time-outs a server keeps on the peers of its listening port, so that a connection
/// that costs without asking anything does not stay for ever: one that has not made its
/// first request (a name server's hello, a gateway's open) in time, one that began a
/// message and did not finish it, one idle for too long.
///
/// One timer on the server's loop checks every peer four times per the shortest
/// time-out, while any peer is followed. The server says when a peer came (`follow`),
/// made its first request (`greeted`), was heard from (`heard`) and went (`forget`), from
/// any thread; `expire` is told, on the loop's thread, which peer is past which time-out,
/// and ends it.
package final class PeerTimeouts: Sendable {
    /// How long a peer may take at each stage.
    package struct Limits: Sendable, Hashable {
        /// From being accepted to its first request.
        package var greeting: Duration
        /// What the first request is, for the reason given (`"say hello"`, `"open a name"`).
        package var greetingName: String
        /// From the first byte of a message to its last.
        package var request: Duration
        /// Silent while holding nothing; `nil`: never closed for that.
        package var idle: Duration?

        /// Limits as named above.
        package init(greeting: Duration, greetingName: String, request: Duration, idle: Duration?) {
            self.greeting = greeting
            self.greetingName = greetingName
            self.request = request
            self.idle = idle
        }
    }

    private struct Entry {
        let peer: PortPeer
        let connected = ContinuousClock.now
        var greeted = false
        var lastActivity = ContinuousClock.now
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var timer: LoopTimer?
        var stopped = false
    }

    private let loop: ThreadLoop
    private let modes: [LoopMode]
    /// The limits kept.
    package let limits: Limits
    private let holdsSomething: @Sendable (PortPeer) -> Bool
    private let expire: @Sendable (PortPeer, String) -> Void
    private let state = Locked(State())

    /// Time-outs on `loop` (its timer in `modes`). `holdsSomething` says whether a peer
    /// holds what keeps it from being idle; `expire` ends a peer past a time-out, `reason`
    /// saying which. Both are called on the loop's thread.
    package init(
        loop: ThreadLoop, modes: [LoopMode] = [.default], limits: Limits,
        holdsSomething: @escaping @Sendable (PortPeer) -> Bool = { _ in false },
        expire: @escaping @Sendable (PortPeer, _ reason: String) -> Void
    ) {
        self.loop = loop
        self.modes = modes
        self.limits = limits
        self.holdsSomething = holdsSomething
        self.expire = expire
    }

    /// Starts following a peer that just connected.
    package func follow(_ peer: PortPeer) {
        let timer = state.withLock { state -> LoopTimer? in
            guard !state.stopped else { return nil }
            state.entries[peer.id] = Entry(peer: peer)
            return armed(&state)
        }
        add(timer)
    }

    /// The peer made its first request: the greeting time-out is behind it.
    package func greeted(_ peer: PortPeer) {
        let now = ContinuousClock.now
        state.withLock { state in
            guard let index = state.entries.index(forKey: peer.id) else { return }
            state.entries.values[index].greeted = true
            state.entries.values[index].lastActivity = now
        }
    }

    /// The peer was heard from (a whole message): it is not idle. Changed in place through
    /// the entry's index (an optional-chained subscript copies the entry out and back, about
    /// a tenth of a name server's request).
    package func heard(_ peer: PortPeer) {
        let now = ContinuousClock.now
        state.withLock { state in
            guard let index = state.entries.index(forKey: peer.id) else { return }
            state.entries.values[index].lastActivity = now
        }
    }

    /// Stops following a peer that went.
    package func forget(_ peer: PortPeer) {
        _ = state.withLock { $0.entries.removeValue(forKey: peer.id) }
    }

    /// Stops following every peer, and the timer.
    package func stop() {
        let timer = state.withLock { state -> LoopTimer? in
            state.stopped = true
            state.entries = [:]
            defer { state.timer = nil }
            return state.timer
        }
        timer?.invalidate()
    }

    /// How many peers are followed.
    package var count: Int { state.withLock { $0.entries.count } }

    /// The shortest time-out, a quarter of it: how often the peers are checked.
    private var interval: Duration {
        [limits.greeting, limits.request, limits.idle ?? limits.greeting].min()! / 4
    }

    /// A timer to add if none is armed and a peer is followed.
    private func armed(_ state: inout State) -> LoopTimer? {
        guard state.timer == nil, !state.entries.isEmpty else { return nil }
        let timer = LoopTimer(after: interval) { [weak self] _ in self?.check() }
        state.timer = timer
        return timer
    }

    private func add(_ timer: LoopTimer?) {
        guard let timer else { return }
        for mode in modes { try? loop.add(timer, forMode: mode) }
    }

    /// Ends the peers past a time-out, then checks again later while any is followed.
    private func check() {
        let now = ContinuousClock.now
        let entries = state.withLock { state -> [Entry] in
            state.timer = nil
            return Array(state.entries.values)
        }
        for entry in entries {
            if !entry.greeted, now - entry.connected >= limits.greeting {
                expire(entry.peer, "did not \(limits.greetingName) within \(limits.greeting)")
            } else if let since = entry.peer.partialMessageSince, now - since >= limits.request {
                expire(entry.peer, "did not finish a request within \(limits.request)")
            } else if let idle = limits.idle, entry.greeted, now - entry.lastActivity >= idle, !holdsSomething(entry.peer) {
                expire(entry.peer, "was idle for \(idle)")
            }
        }
        add(state.withLock { $0.stopped ? nil : armed(&$0) })
    }
}
