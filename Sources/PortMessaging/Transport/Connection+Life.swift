import Glibc
import PermanentThread
import PortKitSystem

extension Connection {
    // MARK: Life and close

    /// A connection's life: open (perhaps bound to a port's loop) until `close`, then
    /// closed, for good, with the reason its requests and close handlers are given. The
    /// descriptors outlive `.open` until the last thread using them leaves (`gate`): the
    /// closed state holds how to release them, taken once by whoever leaves the gate last.
    enum Life {
        case open(Open)
        case closed(PortError, release: Release?)

        /// The binding, while open and bound: one retain, nothing copied (reading it is on
        /// every readable pass).
        var binding: Binding? {
            switch self {
            case .open(let open): open.binding
            case .closed: nil
            }
        }

        /// The bound port's handler, while open and bound.
        var handler: ReceivePort.Handler? { binding?.handler }

        /// The bound port (if it still exists), while open and bound.
        var port: ReceivePort? { binding?.port }

        /// The loop that reads the connection, while open and bound.
        var loop: ThreadLoop? { binding?.loop }

        /// Runs `change` on the open state in place (its arrays are not copied: the enum lets
        /// go of them while `change` runs); `nil` once closed.
        mutating func changeOpen<R>(_ change: (inout Open) -> R) -> R? {
            guard case .open(var open) = self else { return nil }
            self = .closed(.invalidPort, release: nil)
            defer { self = .open(open) }
            return change(&open)
        }
    }

    /// What an open connection holds: its binding, and what its close must run and remove.
    struct Open {
        /// Set once, when a port takes the connection.
        var binding: Binding?
        /// Set once, when a port adopts the connection: the peer it named, through which the
        /// close tells the port first (`ReceivePort.connectionClosed`). Data, not a closure:
        /// nothing to allocate per connection.
        var adoptedPeer: PortPeer?
        var closedHandlers: [@Sendable (PortError) -> Void] = []
        var watchers: [Watcher] = []
    }

    /// How to release a closed connection's descriptors: after removing the source that read
    /// them, on the loop it was on (data, not a closure: nothing to allocate per close).
    struct Release {
        let source: DescriptorSource?
        let loop: ThreadLoop?
    }

    /// A connection bound to a receive port: the loop that reads it, through `source`, and
    /// the port's handler.
    final class Binding: Sendable {
        /// Weak: the port owns its connections, not the other way round.
        weak let port: ReceivePort?
        /// The port's handler (fixed once the port is scheduled).
        let handler: ReceivePort.Handler
        let loop: ThreadLoop
        let source: DescriptorSource

        init(port: ReceivePort, handler: ReceivePort.Handler, loop: ThreadLoop, source: DescriptorSource) {
            self.port = port
            self.handler = handler
            self.loop = loop
            self.source = source
        }
    }

    /// Runs `handler` once when the connection closes (at once if it is closed already).
    func onClose(_ handler: @escaping @Sendable (PortError) -> Void) {
        let closedAlready = withLife { life -> PortError? in
            if life.changeOpen({ $0.closedHandlers.append(handler) }) != nil { return nil }
            guard case .closed(let reason, _) = life else { return nil }
            return reason
        }
        if let closedAlready { handler(closedAlready) }
    }

    /// Records that a port adopted the connection and named its peer `peer` (which knows
    /// the port): the close tells the port (at once if the connection is closed already).
    func adopted(as peer: PortPeer) {
        let closedAlready = withLife { life -> PortError? in
            if life.changeOpen({ $0.adoptedPeer = peer }) != nil { return nil }
            guard case .closed(let reason, _) = life else { return nil }
            return reason
        }
        if let closedAlready { ReceivePort.connectionClosed(self, peer: peer, reason: closedAlready) }
    }

    /// Closes the connection once: waiters, blocked or async, fail with `reason` (recorded before any writer can
    /// see the connection closed, so a send racing the peer's death fails with `peerDied`),
    /// close handlers run, the bound source is removed, and the descriptors are closed by the
    /// last thread using them (on the bound loop's thread, after its source is removed, so a
    /// reused descriptor number is never deregistered or written to by mistake).
    func close(_ reason: PortError) {
        var waiters: [AsyncReply] = []
        let taken = replies.withLock { table -> (DescriptorSource?, ThreadLoop?, PortPeer?, [@Sendable (PortError) -> Void], [Watcher])? in
            guard case .open(let open) = table.life else { return nil }
            waiters = table.asyncWaiters
            // The port and its handler are let go here, under the lock, as the binding ends.
            let (source, loop) = (open.binding?.source, open.binding?.loop)
            table.life = .closed(reason, release: Release(source: source, loop: loop))
            openFlag.store(false, ordering: .releasing)
            return (source, loop, open.adoptedPeer, open.closedHandlers, open.watchers)
        }
        guard let (source, loop, adoptedPeer, handlers, watchers) = taken else { return }
        replies.broadcast()
        let failure = closedError
        for waiter in waiters { waiter.finish(.failure(failure)) }
        // The adopting port and the close handlers first: they tell others (a server its
        // watchers), which is the latency that counts; removing sources and closing
        // descriptors costs more and nothing waits for it.
        if let adoptedPeer { ReceivePort.connectionClosed(self, peer: adoptedPeer, reason: reason) }
        for handler in handlers { handler(reason) }
        for watcher in watchers {
            Self.onLoopThread(watcher.loop) {
                watcher.source.invalidate()
                watcher.loopEnd?.invalidate()
                try? watcher.descriptor.close()
            }
        }
        if let source {
            if let loop, !loop.isCurrent { Self.onLoopThread(loop) { source.invalidate() } } else { source.invalidate() }
        }
        // Close the gate: the last user out, maybe this call, releases the descriptors. A
        // shutdown wakes any thread still in a call on the socket (a writer waiting for room,
        // a waiting reader) and ends the socket for the peer at once. It is left out only
        // when it can change nothing: a Unix socket or pipes, no other user, and a release
        // that closes the last descriptor of the socket as this call leaves the gate (no loop
        // to hop to, no duplicate held by a watcher or the write queue).
        let releasedHere = medium.isLocal && watchers.isEmpty && (loop?.isCurrent ?? true) && !isWatchingForRoom
        _ = withDescriptors {
            if gate.closeFromInside() > 0 || !releasedHere { writeFD.shutdown() }
        }
        discardQueued()
    }

    /// Releases the descriptors, once: the connection is closed and no one uses them.
    func releaseDescriptors() {
        let taken = withLife { life -> Release? in
            guard case .closed(let reason, let release?) = life else { return nil }
            life = .closed(reason, release: nil)
            return release
        }
        guard let taken else { return }
        let pending = inbound.withLock { state in
            defer { state.descriptors = [] }
            return state.descriptors
        }
        let medium = self.medium
        if let loop = taken.loop, !loop.isCurrent {
            Self.onLoopThread(loop) { Self.release(medium, after: taken.source, pending: pending) }
        } else {
            Self.release(medium, after: taken.source, pending: pending)
        }
    }

    /// Closes the descriptors of `medium` and the `pending` ones read with them, once
    /// `source` is removed (again, in case the last user was the loop's own thread, ahead of
    /// the removal `close` asked for).
    private static func release(_ medium: Medium, after source: DescriptorSource?, pending: [CInt]) {
        source?.invalidate()
        medium.closeDescriptors()
        FileDescriptor.close(pending)
    }

    /// Runs `work` on `loop`'s thread (now, if that is this thread; inline if the loop has
    /// ended, when nothing can race with it any more).
    static func onLoopThread(_ loop: ThreadLoop, _ work: @escaping @Sendable () -> Void) {
        if loop.isCurrent || (try? loop.perform(label: "close connection", work)) == nil { work() }
    }
}
