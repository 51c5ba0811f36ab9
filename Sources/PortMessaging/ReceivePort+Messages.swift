import Glibc
import PermanentThread
import PortKitSystem

/// A message as an iteration of `ReceivePort.messages(on:inModes:)` hands it over.
public struct ReceivedMessage: Sendable {
    /// The message.
    public let message: Message
    /// For a request, what answers it: `reply(_:)` now or later, from any thread. Let go
    /// unanswered, it fails the request with `PortError.noReply`. `nil` for a one-way message.
    public let reply: PendingReply?
}

/// The messages of a receive port, as an asynchronous sequence:
/// `for await received in try port.messages(on: loop) { … }`. See
/// `ReceivePort.messages(on:inModes:)`. One iteration per sequence: iterating it again
/// after the first iteration ended yields nothing.
public struct ReceivedMessages: AsyncSequence, Sendable {
    /// What the sequence yields.
    public typealias Element = ReceivedMessage
    /// The sequence never throws: it ends.
    public typealias Failure = Never

    let stream: MessageStream

    /// Starts the iteration.
    public func makeAsyncIterator() -> Iterator { Iterator(owner: Owner(stream: stream)) }

    /// The iterator of `ReceivedMessages`: dropping it (leaving the `for await` loop) ends
    /// the iteration.
    public struct Iterator: AsyncIteratorProtocol {
        /// The iterator's error type: none.
        public typealias Failure = Never

        let owner: Owner

        /// The next message, suspending until one comes; `nil` once the iteration ended
        /// (the task was cancelled, or the port invalidated).
        public mutating func next() async -> ReceivedMessage? {
            await owner.stream.next(isolation: nil)
        }

        /// The next message, resuming on `actor`; as `next()`.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> ReceivedMessage? {
            await owner.stream.next(isolation: actor)
        }
    }

    /// Ends the iteration when the last copy of its iterator goes away.
    final class Owner: Sendable {
        let stream: MessageStream
        init(stream: MessageStream) { self.stream = stream }
        deinit { stream.end() }
    }
}

extension ReceivePort {
    /// The port's messages, as an asynchronous sequence, delivered through `loop`:
    ///
    /// ```swift
    /// for await received in try port.messages(on: thread.loop!) {
    ///     received.reply?.reply(Message(id: received.message.id, text: "done"))
    /// }
    /// ```
    ///
    /// The port is scheduled on `loop` in `modes` (`loop` runs its sources: the in-process
    /// queue, its connections, its listener; a `PermanentThread`'s loop is the usual
    /// choice), and its loop hands each message to the iterating task, which runs wherever
    /// it runs. A request comes with its `PendingReply` (`ReceivedMessage.reply`).
    ///
    /// **Bounded.** The loop hands at most `min(capacity, 64)` messages over ahead of the
    /// consumer. Then the port stops reading: in-process messages wait in its queue
    /// (`capacity`) and then their senders wait and fail with `PortError.sendTimedOut`;
    /// connections are not read, so their senders wait and fail the same way. The frames
    /// of one read already made from a socket are handed over whole.
    ///
    /// **Ending.** Leaving the loop (`break`, `return`, a thrown error), cancelling the
    /// iterating task, or invalidating the port ends the iteration: the port stops reading
    /// and stays scheduled on `loop`, holding back. A request handed over but not yet
    /// taken by the consumer is refused: its sender gets `PortError.noReply`. A one-way
    /// message handed over but not taken goes back to the front of the port's queue, in
    /// order; messages never handed over stay where they are (the queue, the sockets).
    /// Nothing is dropped: a later `messages` call on the same loop receives them, and
    /// invalidating the port fails queued requests with `invalidPort` and closes the
    /// descriptors of queued one-way messages, as always.
    ///
    /// - Parameters:
    ///   - loop: the loop that runs the port's sources. A later call (after an iteration
    ///     ended) must name the same loop; its modes are those of the first call.
    ///   - modes: the loop modes the port is scheduled in.
    /// - Throws: `.invalidPort`; `.alreadyScheduled` when the port is scheduled with a
    ///   handler, on another loop, or another iteration is under way.
    public func messages(on loop: ThreadLoop, inModes modes: [LoopMode] = [.default]) throws(PortError) -> ReceivedMessages {
        let existing = try state.withLock { (state) throws(PortError) -> StreamSlot? in
            guard state.valid else { throw .invalidPort }
            guard let schedule = state.schedule else { return nil }
            guard let slot = schedule.handler.stream, schedule.loop === loop else { throw .alreadyScheduled }
            return slot
        }
        let slot = existing ?? StreamSlot()
        let stream = MessageStream(port: self, loop: loop, slot: slot)
        guard slot.install(stream) else { throw .alreadyScheduled }
        if existing != nil {
            setReading(true)
        } else {
            try schedule(on: loop, inModes: modes, Handler(deferring: { [weak self] message, reply in
                guard !slot.push(message, reply: reply) else { return }
                // No iteration takes it: a request is refused (its `PendingReply` goes away),
                // a one-way message waits in the queue for the next one.
                if reply == nil { self?.returnToQueue([message]) }
            }, stream: slot))
        }
        onInvalidation { [weak stream] _ in stream?.end() }
        return ReceivedMessages(stream: stream)
    }

    /// Stops or restarts reading the port's connections and accepting at its listener (an
    /// iteration holding back); restarting also drains what waits in the queue. Callable
    /// from any thread; carried out on the port's loop.
    func setReading(_ reading: Bool) {
        let loop = state.withLock { state -> ThreadLoop? in
            guard state.valid, let schedule = state.schedule, state.readingPaused == reading else { return nil }
            state.readingPaused = !reading
            return schedule.loop
        }
        if let loop { applyReadingOnLoop(loop) }
    }

    /// Puts the port's connection sources and listener in or out of its modes, as
    /// `readingPaused` says when this runs on the loop (so that a stop and a restart made
    /// from two threads end as the later one says).
    func applyReadingOnLoop(_ loop: ThreadLoop) {
        Connection.onLoopThread(loop) { [weak self] in
            guard let self, let (schedule, connections, listener, paused) = self.state.withLock({ state in
                state.schedule.map { ($0, Array(state.connections.values), state.listener, state.readingPaused) }
            }) else { return }
            for mode in schedule.modes {
                for connection in connections {
                    guard let source = connection.boundSource else { continue }
                    if paused { schedule.loop.remove(source, forMode: mode) } else { try? schedule.loop.add(source, forMode: mode) }
                }
                listener?.change(mode, adding: !paused)
            }
            if !paused { schedule.source.signal() }
        }
    }

    /// Puts one-way messages an iteration did not take back at the front of the queue, in
    /// order (over the queue's bound: they were in it, or read from a socket, already).
    func returnToQueue(_ messages: [Message]) {
        let kept = queue.withLock { queue -> Bool in
            guard queue.valid else { return false }
            queue.envelopes.insert(contentsOf: messages.map { Envelope(message: $0) }, at: 0)
            return true
        }
        guard !kept else { return }
        for message in messages { FileDescriptor.close(message.descriptors) }
    }

    /// After a drain that left messages queued for want of room: drains again (next pass)
    /// if room appeared meanwhile. Without room the iteration holds back, and restarts
    /// reading (which drains) once its consumer has taken half of what it holds.
    func resignal(ifRoomIn slot: StreamSlot) {
        guard slot.room > 0 else { return }
        let source = queue.withLock { queue in queue.envelopes.isEmpty ? nil : queue.source }
        source?.signal()
    }
}
