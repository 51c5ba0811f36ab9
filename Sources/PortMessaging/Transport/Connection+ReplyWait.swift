import Glibc
import PermanentThread
import PortKitSystem

extension Connection {
    // MARK: Waiting for a reply

    /// How long a request waits on its connection alone, when its thread's loop reads the
    /// connection, before that loop serves its other work again. On a socket the wait is
    /// a read with this receive timeout, which the kernel rounds up to whole clock ticks:
    /// up to 4 ms on a 250 Hz kernel (its timer wheel is what makes the wait cheap).
    static let directWaitSlice: Duration = .milliseconds(1)
    /// `directWaitSlice` in whole milliseconds.
    static let sliceMilliseconds = milliseconds(directWaitSlice)

    /// `duration` in whole milliseconds for `poll`, rounded up (so a wait never ends
    /// early and spins), at least 0, at most a day; integer arithmetic only.
    static func milliseconds(_ duration: Duration) -> CInt {
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
        if seconds >= 86_400 { return 86_400_000 }
        let perMillisecond: Int64 = 1_000_000_000_000_000
        return CInt(seconds * 1000 + (attoseconds + perMillisecond - 1) / perMillisecond)
    }

    /// Waits for the reply to `sequence` until `deadline`.
    ///
    /// On a connection another thread's loop reads, that loop hands the reply over. When
    /// this thread reads it itself (an unbound connection, or one bound to this thread's
    /// loop), it waits on the connection's descriptor and reads it. Bound to this thread's
    /// loop, that direct wait lasts about `directWaitSlice` (like CFMessagePortSendRequest's
    /// private reply mode, but short): a reply later than that is waited for by running
    /// the loop, which serves its other work (timers, blocks, other ports) meanwhile, as
    /// before. Frames other than the reply still reach the bound port's handler (an
    /// unbound connection has none: they are dropped).
    ///
    /// The wait ends at `sent + timeout` (`timeout` nil: never).
    func awaitReply(_ sequence: UInt64, sent: ContinuousClock.Instant, timeout: Duration?) throws(PortError) -> Message {
        let deadline = timeout.map { sent + $0 }
        // A waiting read's timeout, rounded up to clock ticks, must not overshoot the deadline.
        let mayWaitReading = timeout.map { $0 > Self.waitingReadMargin } ?? true
        // Neither the port nor the loop is retained here: both have side-table reference
        // counts (weak references to them exist), which make every retain a slow one.
        let (bound, onLoopThread) = withLife { ($0.handler != nil, $0.loop?.isCurrent ?? false) }
        guard bound else { return try awaitReplyReading(sequence, deadline: deadline, mayWaitReading: mayWaitReading) }
        if onLoopThread {
            if let reply = try awaitReplyDirectly(sequence, deadline: deadline, mayWaitReading: mayWaitReading) { return reply }
            // Slow: run the loop (its source reads the connection) until the reply is in.
            guard let loop = withLife({ $0.loop }), loop.isCurrent else {
                return try awaitReplyReading(sequence, deadline: deadline, mayWaitReading: false)
            }
            let mode = loop.currentMode ?? .default
            while replies.withLock({ $0.outcome(sequence, peek: true) == nil }), deadline.map({ ContinuousClock.now < $0 }) ?? true {
                try loop.runForWait(in: mode, until: deadline)
            }
        }
        let outcome = replies.wait(until: deadline) { table in table.outcome(sequence) }
        guard let outcome else { throw .receiveTimedOut }
        return try outcome.get()
    }

    /// The first `directWaitSlice` of a wait on a connection bound to this thread's loop:
    /// waits on the descriptor alone and reads it here. The usual round trip ends here
    /// with two lock holds, no clock reading and, on a socket, one system call: a read that
    /// waits up to the socket's receive timeout (a kernel timer-wheel timeout, rounded up
    /// to whole clock ticks), where a `poll` then a read cost a second call and a
    /// high-resolution timer armed and cancelled per round trip. `nil`: no reply yet.
    private func awaitReplyDirectly(
        _ sequence: UInt64, deadline: ContinuousClock.Instant?, mayWaitReading: Bool
    ) throws(PortError) -> Message? {
        var reply: Message?
        var handler: ReceivePort.Handler??
        let waitingReads = mayWaitReading && prepareWaitingReads()
        // The slice is one waiting read (or one poll: its granularity is a millisecond,
        // rounded up), unless other frames arrive first (then the clock ends it).
        let sliceMilliseconds = Self.sliceMilliseconds
        var sliceEnd: ContinuousClock.Instant?
        while true {
            if !waitingReads {
                if try pollReadable(milliseconds: sliceMilliseconds) == 0 { return nil }  // the slice is over
            }
            let end = readAvailable(maxChunks: 64, waitingFirst: waitingReads) { delivery in
                switch consume delivery {
                case .reply(sequence, let message) where reply == nil:
                    reply = message
                case let other:
                    if handler == nil { handler = .some(withLife { $0.handler }) }
                    deliver(other, handler: handler ?? nil)
                }
            }
            if let reply {
                // Taken here, not through the table: this thread is the connection's reader.
                return reply
            }
            if waitingReads && end == .nothingArrived { return nil }  // the slice is over
            if end == .closed, let failure = replies.withLock({ $0.failure }) { throw failure }
            // Other frames came first (or a nested run took the reply): the slice goes on,
            // by the clock now, so a chatty peer cannot keep the loop waiting.
            if let outcome = replies.withLock({ $0.outcome(sequence) }) { return try outcome.get() }
            let now = ContinuousClock.now
            if let deadline, now >= deadline { throw .receiveTimedOut }
            if let end = sliceEnd, now >= end { return nil }
            if sliceEnd == nil { sliceEnd = now + Self.directWaitSlice }
        }
    }

    /// Waits for the reply on an unbound connection, which its requester reads: first with
    /// one waiting read (as the direct wait does), then with `poll` until the deadline.
    private func awaitReplyReading(
        _ sequence: UInt64, deadline: ContinuousClock.Instant?, mayWaitReading: Bool
    ) throws(PortError) -> Message {
        /// What a waiter does next.
        enum Turn {
            case done(Result<Message, PortError>)
            case read
        }
        var waitFirst = mayWaitReading && prepareWaitingReads()
        while true {
            // The reply, or the reader's part (one thread reads for every waiter; the others
            // wait to be handed their replies, or the part when the reader leaves).
            let turn = replies.wait(until: deadline) { table -> Turn? in
                if let outcome = table.outcome(sequence) { return .done(outcome) }
                return table.reader.takeForRequester() ? .read : nil
            }
            switch turn {
            case .none: throw .receiveTimedOut
            case .done(let outcome)?: return try outcome.get()
            case .read?: break
            }
            let read = Result { () throws(PortError) in
                if waitFirst {
                    // Frames ahead of the reply (the peer's limits, say) mean it may be
                    // close behind: wait reading again. A read that waited for nothing
                    // ends the waiting reads.
                    if readAvailable(maxChunks: 64, waitingFirst: true, takeUnbound) == .nothingArrived { waitFirst = false }
                    if let deadline, ContinuousClock.now >= deadline { throw .receiveTimedOut }
                    return
                }
                var timeout: Duration?
                if let deadline {
                    let now = ContinuousClock.now
                    if now >= deadline { throw .receiveTimedOut }
                    timeout = deadline - now
                }
                if try pollReadable(timeout: timeout) != 0 { _ = readAvailable(maxChunks: 64, takeUnbound) }
            }
            stopReading()
            try read.get()
        }
    }

    /// Waits up to `milliseconds` (-1: for ever) for the connection to be readable; the
    /// ready events, or 0.
    private func pollReadable(milliseconds: CInt) throws(PortError) -> CShort {
        try usingDescriptors("poll") { () throws(Errno) -> CShort in try readFD.poll(CShort(POLLIN), milliseconds: milliseconds) }
    }

    /// Waits up to `timeout` (`nil`: for ever) for the connection to be readable, however
    /// many signals interrupt the wait; the ready events, or 0.
    private func pollReadable(timeout: Duration?) throws(PortError) -> CShort {
        try usingDescriptors("poll") { () throws(Errno) -> CShort in try readFD.poll(CShort(POLLIN), timeout: timeout) }
    }

    /// The least receive timeout for which a wait begins with a waiting read: more than
    /// the read's own timeout (`directWaitSlice`) rounded up to a tick of a 100 Hz kernel.
    static let waitingReadMargin: Duration = .milliseconds(20)

    /// Makes the socket ready for waiting reads, once: blocking (every other read and write
    /// passes `MSG_DONTWAIT`, so only a waiting read ever blocks), with `directWaitSlice`
    /// as its receive timeout. False for pipes, or when the socket refused.
    private func prepareWaitingReads() -> Bool {
        let known = waitingReads.load(ordering: .acquiring)
        if known != .unknown { return known == .ready }
        return withDescriptors { inbound.withLock { _ in
            let known = waitingReads.load(ordering: .acquiring)
            if known != .unknown { return known == .ready }
            var ready = false
            if let fd = medium.plainSocket {
                // Either call failing leaves the socket non-blocking (the flag is cleared
                // last, in one fcntl), so a refusal needs no undoing.
                do throws(Errno) {
                    try fd.setReceiveTimeout(microseconds: Int(Self.sliceMilliseconds) * 1000)
                    if !blockingSocket { try fd.setNonBlocking(false) }
                    ready = true
                } catch {}
            }
            waitingReads.store(ready ? .ready : .unavailable, ordering: .releasing)
            return ready
        } } ?? false
    }
}
