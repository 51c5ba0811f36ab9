import PermanentThread
import PortKitSystem
import PortKitLocks

/// One iteration of a port's `messages`: the messages the port's loop has handed over and
/// the consumer has not taken yet (at most `limit`, then the port stops reading), and the
/// consumer's suspended `next()`.
///
///     iterating ──buffer full──▶ held back (the port reads nothing) ──half taken──▶ iterating
///         │                           │
///         └──break, cancel, invalidation┴──▶ ended (held requests refused, held one-way
///                                            messages back to the front of the port's queue)
final class MessageStream: Sendable {
    private struct State {
        /// Handed over by the loop, in order, from `head` on.
        var buffer: [ReceivedMessage] = []
        var head = 0
        /// The consumer's suspended `next()`, when the buffer is empty.
        var consumer: CheckedContinuation<ReceivedMessage?, Never>?
        /// Whether the port was told to stop reading (the buffer reached `limit`).
        var holdingBack = false
        var ended = false

        var count: Int { buffer.count - head }

        /// Takes the first buffered message, and says whether the port may read again (it
        /// held back, and half the buffer is taken now).
        mutating func takeFirst(limit: Int) -> (message: ReceivedMessage?, resumeReading: Bool) {
            guard head < buffer.count else { return (nil, false) }
            let first = buffer[head]
            head += 1
            if head == buffer.count {
                buffer.removeAll(keepingCapacity: true)
                head = 0
            }
            guard holdingBack, !ended, count <= limit / 2 else { return (first, false) }
            holdingBack = false
            return (first, true)
        }
    }

    private let state = Locked(State())
    /// The most messages handed over ahead of the consumer.
    let limit: Int
    /// The port iterated (held: iterating keeps it alive).
    let port: ReceivePort
    let loop: ThreadLoop
    /// Where the port finds its iteration; it keeps what is handed over after the end.
    let slot: StreamSlot

    init(port: ReceivePort, loop: ThreadLoop, slot: StreamSlot) {
        self.port = port
        self.loop = loop
        self.slot = slot
        limit = min(port.capacity, Self.maxAhead)
    }

    /// The most messages an iteration takes from the port ahead of its consumer.
    static let maxAhead = 64

    /// How many more messages the loop may hand over now (0 once ended).
    var room: Int {
        state.withLock { state in state.ended ? 0 : max(0, limit - state.count) }
    }

    /// Whether the iteration has ended.
    var isEnded: Bool { state.withLock { $0.ended } }

    /// Hands a message over (on the port's loop thread); false, and nothing kept, once the
    /// iteration has ended.
    func push(_ message: Message, reply: PendingReply?) -> Bool {
        enum Next {
            case kept, holdBack, ended
            case resume(CheckedContinuation<ReceivedMessage?, Never>)
        }
        let received = ReceivedMessage(message: message, reply: reply)
        let next = state.withLock { state -> Next in
            if state.ended { return .ended }
            if let consumer = state.consumer.take() { return .resume(consumer) }
            state.buffer.append(received)
            guard state.count >= limit, !state.holdingBack else { return .kept }
            state.holdingBack = true
            return .holdBack
        }
        switch next {
        case .kept: return true
        case .ended: return false
        case .holdBack: port.setReading(false)
        case .resume(let consumer): consumer.resume(returning: received)
        }
        return true
    }

    /// The next message, suspending until the loop hands one over; `nil` once the iteration
    /// has ended. Cancelling the calling task ends the iteration.
    func next(isolation actor: isolated (any Actor)?) async -> ReceivedMessage? {
        enum Now {
            case parked
            case value(ReceivedMessage?, resumeReading: Bool)
        }
        let limit = self.limit
        let first = state.withLock { $0.takeFirst(limit: limit) }
        if first.resumeReading { port.setReading(true) }
        if let message = first.message { return message }
        return await withTaskCancellationHandler {
            await withCheckedContinuation(isolation: actor) { (continuation: CheckedContinuation<ReceivedMessage?, Never>) in
                let now = state.withLock { state -> Now in
                    if state.ended { return .value(nil, resumeReading: false) }
                    let first = state.takeFirst(limit: limit)
                    guard first.message == nil else { return .value(first.message, resumeReading: first.resumeReading) }
                    state.consumer = continuation
                    return .parked
                }
                guard case .value(let message, let resumeReading) = now else { return }
                if resumeReading { port.setReading(true) }
                continuation.resume(returning: message)
            }
        } onCancel: {
            end()
        }
    }

    /// Ends the iteration, once: a suspended `next()` returns `nil`, the port stops reading,
    /// requests handed over but not taken are refused (their senders get
    /// `PortError.noReply`), and one-way messages handed over but not taken go back to the
    /// front of the port's queue, in order, for whoever receives next.
    func end() {
        let port = self.port
        let slot = self.slot
        let taken = state.withLock { state -> (CheckedContinuation<ReceivedMessage?, Never>?, ArraySlice<ReceivedMessage>)? in
            guard !state.ended else { return nil }
            // Before anyone can see the end: a push refused from now on is kept by the slot.
            slot.returnBegan()
            state.ended = true
            defer { state.buffer = []; state.head = 0 }
            return (state.consumer.take(), state.buffer[state.head...])
        }
        guard let (consumer, held) = taken else { return }
        consumer?.resume(returning: nil)
        port.setReading(false)
        var oneWay: [Message] = []
        for item in held {
            if let reply = item.reply { reply.refuse() } else { oneWay.append(item.message) }
        }
        // On the loop, after any drain or read in progress: the one-way messages it hands
        // over meanwhile (kept by the slot) go back behind these, all in the order they came.
        do {
            try loop.perform { [oneWay] in port.returnToQueue(oneWay + slot.returnEnded()) }
        } catch {
            for message in oneWay + slot.returnEnded() { FileDescriptor.close(message.descriptors) }
        }
    }

    deinit { end() }
}

/// Where a port scheduled by `messages` finds its current iteration: one at a time, and
/// another once that one has ended. Weak: the iteration's owner (its sequence and
/// iterator) ends it by letting it go.
///
/// Between an iteration's end and the return of what it held to the port's queue (on the
/// loop), a drain or read under way may still hand one-way messages over: the slot keeps
/// them, in order, and they go back behind the held ones.
final class StreamSlot: Sendable {
    private struct Current {
        weak var stream: MessageStream?
    }

    private struct Late {
        /// Ended iterations whose held messages have not gone back yet.
        var returnsPending = 0
        var messages: [Message] = []
    }

    private let current = Locked(Current())
    /// Apart from `current`: it is taken while an iteration's own lock is held.
    private let late = Locked(Late())

    /// The iteration messages go to, while one is under way.
    var stream: MessageStream? {
        current.withLock { current in current.stream.flatMap { $0.isEnded ? nil : $0 } }
    }

    /// How many messages the port's queue may hand over now (0 without an iteration).
    var room: Int { stream?.room ?? 0 }

    /// Makes `stream` the current iteration; false when another is still under way.
    func install(_ stream: MessageStream) -> Bool {
        current.withLock { current in
            if let running = current.stream, !running.isEnded { return false }
            current.stream = stream
            return true
        }
    }

    /// Hands a message to the current iteration; false when none took it and the slot did
    /// not keep it (a request, or no ended iteration's return is pending).
    func push(_ message: Message, reply: PendingReply?) -> Bool {
        if current.withLock({ $0.stream })?.push(message, reply: reply) == true { return true }
        guard reply == nil else { return false }
        return late.withLock { late in
            guard late.returnsPending > 0 else { return false }
            late.messages.append(message)
            return true
        }
    }

    /// An iteration is ending: what is refused until its return goes back with it.
    func returnBegan() {
        late.withLock { $0.returnsPending += 1 }
    }

    /// The ending iteration's return: the one-way messages kept since it began.
    func returnEnded() -> [Message] {
        late.withLock { late in
            late.returnsPending -= 1
            defer { late.messages = [] }
            return late.messages
        }
    }
}
