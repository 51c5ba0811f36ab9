import Glibc
import PermanentThread
import PortKitLocks

extension Connection {
    // MARK: Async waits

    /// The loop that hands this connection's replies to async requests: the loop its port
    /// is bound to, which reads it already; else (an unbound connection, as `connect(to:)`
    /// or a lookup gives) the shared reply loop, which from the first async request on
    /// reads the connection for good — then blocked requesters on it wait to be handed
    /// their replies too, instead of reading themselves.
    /// - Throws: `.system` when the shared reply loop cannot be started, or the connection
    ///   cannot be watched (out of descriptors).
    func replyLoop() throws(PortError) -> ThreadLoop {
        if let loop = withLife({ $0.loop }) { return loop }
        if let chosen = replies.withLock({ $0.reader.chosenLoop }) { return chosen }
        let shared = try SharedReplyLoop.loop()
        return try readReplies(on: shared)
    }

    /// Ends async request `sequence` with `receiveTimedOut` once `timeout` has passed
    /// from `sent` (`nil`: never), by the connection's deadline timer on its reply loop
    /// (starting what reads the replies); if that cannot start, the wait ends at once with
    /// the failure. The connection keeps one timer, at its earliest deadline: a request
    /// whose deadline comes no earlier arms nothing, so a stream of requests wakes the reply
    /// loop for their replies only.
    func timeOut(_ sequence: UInt64, _ waiter: AsyncReply, after timeout: Duration?, from sent: ContinuousClock.Instant) {
        do throws(PortError) {
            let loop = try replyLoop()
            guard let timeout else { return }
            let timer = replies.withLock { table in
                table.setDeadline(sent + timeout, of: sequence) { deadlineTimer(at: sent + timeout, on: loop) }
            }
            if let timer { try arm(timer, on: loop) }
        } catch {
            waiter.finish(.failure(error))
        }
    }

    /// A timer that ends the requests due when it fires, and arms the next.
    private func deadlineTimer(at date: ContinuousClock.Instant, on loop: ThreadLoop) -> LoopTimer {
        let connection = Unretained(self)
        return LoopTimer(fireAt: date) { [weak loop] fired in
            guard let self = connection.object, let loop else { return }
            let (due, next) = self.replies.withLock { table in
                table.takeDue(at: .now, fired: fired) { self.deadlineTimer(at: $0, on: loop) }
            }
            if let next { try? self.arm(next, on: loop) }
            for waiter in due { waiter.finish(.failure(.receiveTimedOut)) }
        }
    }

    /// Adds a deadline timer to `loop`, or to the shared reply loop when `loop` has ended.
    private func arm(_ timer: LoopTimer, on loop: ThreadLoop) throws(PortError) {
        if (try? loop.add(timer, forMode: .common)) == nil {
            do { try SharedReplyLoop.loop().add(timer, forMode: .common) } catch { throw .invalidPort }
        }
    }

    /// Makes `loop` the one that reads this unbound connection's replies from now on
    /// (unless another loop does already: then that one, which is returned).
    /// - Throws: `.system` when the connection cannot be watched (out of descriptors).
    @discardableResult
    func readReplies(on loop: ThreadLoop) throws(PortError) -> ThreadLoop {
        if let bound = withLife({ $0.loop }) { return bound }
        let (reader, startNow) = replies.withLock { $0.reader.choose(loop) }
        if startNow { try startLoopReader(on: reader) }
        return reader
    }

    /// Reads the connection on `loop` from now on: a readable-only source on a duplicate of
    /// its descriptor (closed with the connection, like a hang-up watcher's). On failure,
    /// requesters read again themselves.
    func startLoopReader(on loop: ThreadLoop) throws(PortError) {
        do throws(PortError) {
            // Not `weak`: a weak reference would move the connection's counts to a side
            // table, and every retain of it on every request to the slow path.
            let connection = Unretained(self)
            try watchDuplicate(on: loop, events: .readable, whenLoopEnds: { connection.object?.readerEnded(loop) }) { source, _ in
                guard let connection = connection.object else { return source.invalidate() }
                connection.sharedLoopCanRead(source)
            }
        } catch {
            replies.withLock { $0.reader.loopFailed() }
            replies.broadcast()
            throw error
        }
    }

    /// The loop that read this connection for good ended (its thread stopped) while the
    /// connection is open: the shared reply loop reads it from now on, with the waiting
    /// requests' deadlines, so no request waits for a reader that is gone. Should that loop
    /// not start, the connection closes and its requests fail with why.
    private func readerEnded(_ loop: ThreadLoop) {
        guard isOpen, replies.withLock({ $0.reader.loopEnded(loop) }) else { return }
        replies.broadcast()
        do throws(PortError) {
            let shared = try SharedReplyLoop.loop()
            try readReplies(on: shared)
            let timer = replies.withLock { table in table.rearmDeadline { deadlineTimer(at: $0, on: shared) } }
            if let timer { try arm(timer, on: shared) }
        } catch {
            close(error)
        }
    }

    /// Called by the shared reply loop when the connection is readable: replies go to their
    /// requests; other frames are dropped, as a blocked requester's read drops them. A
    /// connection bound to a port since is read by the port's loop: this source stops.
    private func sharedLoopCanRead(_ source: DescriptorSource) {
        guard withLife({ $0.handler == nil }) else { return source.invalidate() }
        _ = readAvailable(maxChunks: 16, takeUnbound)
    }

    /// A write found the peer gone, but what it wrote before it went may still be unread.
    /// A receive port's connection, and one the shared reply loop reads, stay open: their
    /// loop reads them to the end, delivering what is left, and closes them there (with
    /// `peerDied`). Any other connection is read here (`takeRepliesLeftBehind`), then closed.
    func peerGoneOnWrite() {
        if inbound.withLock({ $0.peer != nil }) || replies.withLock({ $0.reader.isLoop }) { return }
        takeRepliesLeftBehind()
        close(.peerDied)
    }

    /// Reads what the gone peer of a connection that only its requesters read left unread,
    /// unless a requester is reading it now: its replies (a refusal written just before
    /// the peer closed, say) reach their requests instead of going with the connection.
    private func takeRepliesLeftBehind() {
        guard replies.withLock({ $0.reader.takeForRequester() }) else { return }
        _ = readAvailable(maxChunks: 64, takeUnbound)
        stopReading()
    }

    /// The requester that took the reading (`ReplyReader.takeForRequester`) gives it up:
    /// the waiters are woken (one may read next, or find its reply in), and a loop named to
    /// read meanwhile (an async request's) reads from now on; if it cannot, requesters read
    /// again themselves.
    func stopReading() {
        let handOver = replies.withLock { $0.reader.requesterLeaves() }
        replies.broadcast()
        if let handOver { try? startLoopReader(on: handOver) }
    }

    /// Hands what was read on an unbound connection over: replies and refusals to their
    /// requests; nothing else receives here (messages are dropped, their descriptors closed).
    func takeUnbound(_ delivery: consuming Delivery) {
        switch consume delivery {
        case .reply(let sequence, let message): complete(sequence, with: .success(message))
        case .refused(let sequence, let error): complete(sequence, with: .failure(error))
        case .undelivered(let kind, let sequence): failUndelivered(kind, sequence)
        case .incoming(_, _, let message): discard(message)
        case .adopt(let socket): try? socket.close()
        case .limits(let bytes): peerMaxMessageBytes.store(bytes, ordering: .relaxed)
        }
    }
}
