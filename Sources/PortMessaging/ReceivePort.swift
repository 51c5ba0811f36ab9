import Glibc
import PermanentThread
import Synchronization
import PortKitSystem
import PortKitLocks

/// A port messages arrive at: the receiving half of the seeds' NSMachPort pair.
///
/// Make one, `schedule` it on a run loop in some modes with a handler, and hand out send
/// ports: `makeSendPort()` for threads of this process (messages are moved to the port's
/// queue — no encoding, no socket), or pass a send port inside a message, or hand it to a
/// child (`ChildWorker`), to reach it from other processes over Unix sockets or pipes.
/// The handler runs on the loop's thread, one message at a time, in arrival order per
/// sender; for a request, what it returns is the reply. From a task, iterate the port
/// instead: `for await received in try port.messages(on: loop) { … }`
/// (`messages(on:inModes:)`).
///
/// Bounded: at most `capacity` in-process messages wait in the queue; a sender then
/// waits up to its timeout and fails with `PortError.sendTimedOut`. Nothing is dropped.
public final class ReceivePort: Sendable {
    /// The default bound of the in-process queue.
    public static let defaultCapacity = 1024

    /// The default largest message accepted from another process: 16 MiB.
    public static let defaultMaxMessageBytes = 16 * 1024 * 1024

    /// The most in-process messages that may wait in the queue.
    public let capacity: Int
    /// The largest message (bytes components together) the port accepts.
    public let maxMessageBytes: Int
    /// The default of `maxQueuedBytes`: 4 MiB.
    public static let defaultMaxQueuedBytes = 4 * 1024 * 1024
    /// How much a loop's thread may leave queued on each connection of this port when the
    /// peer reads slowly: a write on a running loop's thread never waits for room, what the
    /// socket does not take is written from the loop as it drains. Past this bound such a
    /// write waits like any other (and fails at once with `sendTimedOut` under a zero
    /// timeout, as `PendingReply.answer(_:timeout:)` takes one).
    public let maxQueuedBytes: Int
    let limits: WireLimits
    /// The limits of the first frame of a peer accepted over TCP, when narrower.
    let firstMessageLimits: WireLimits?
    let queue: ConditionLock<LocalQueue>
    let state = Locked(State())
    let checkIns = ConditionLock<[SendPort]>([])
    let checkInsToHandler = Atomic<Bool>(false)
    /// The `identity` of the loop the port is scheduled on, 0 until it is (a port is
    /// scheduled once, and its schedule keeps the loop alive): `loopIfCurrent`'s usual
    /// answer, no, without the state's lock.
    private let scheduledLoopIdentity = Atomic<UInt>(0)

    /// A message moved in-process, with where its reply goes (for a request).
    struct Envelope {
        var message: Message
        var reply: ReplySlot?
        var isCheckIn = false
    }

    struct LocalQueue {
        var envelopes: [Envelope] = []
        /// The emptied array of the last drain, kept for its capacity (no regrowing the
        /// queue from nothing after every drain).
        var spare: [Envelope] = []
        var valid = true
        var sendersWaiting = false
        /// The scheduled port's source and handler, kept here too, so that a sender and a
        /// drain find them in the lock hold they need anyway.
        var source: LoopSource?
        var handler: Handler?
    }

    /// A port's handler, wrapped: a bare closure handed out through a lock's generic
    /// `withLock` is re-abstracted, which allocates on every call; a struct is not.
    struct Handler {
        /// The reply-returning form: what it returns answers a request.
        let body: @Sendable (Message) -> Message?
        /// The deferring form, when the port was scheduled with one: it is handed a request's
        /// `PendingReply` and answers when it likes.
        let deferring: (@Sendable (Message, PendingReply?) -> Void)?
        /// The iteration it hands messages to, when the port was scheduled by `messages`:
        /// the in-process queue is drained only as far as it has room.
        let stream: StreamSlot?

        init(body: @escaping @Sendable (Message) -> Message?) {
            self.body = body
            deferring = nil
            stream = nil
        }

        init(deferring: @escaping @Sendable (Message, PendingReply?) -> Void, stream: StreamSlot? = nil) {
            body = { message in deferring(message, nil); return nil }
            self.deferring = deferring
            self.stream = stream
        }

        /// Hands `message` to the handler; `answer` is where its reply goes, if it is a request.
        func handle(_ message: Message, answer: PendingReply.Target?) {
            guard let answer else { return _ = body(message) }
            if let deferring {
                deferring(message, PendingReply(answer, requestID: message.id))
            } else {
                answer.send(body(message) ?? Message(id: message.id))
            }
        }
    }

    struct Schedule {
        let loop: ThreadLoop
        /// The modes its sources are in: those `schedule` was given, then as `add(toMode:)`
        /// and `remove(fromMode:)` change them.
        var modes: [LoopMode]
        let handler: Handler
        let source: LoopSource
    }

    struct State {
        var valid = true
        var schedule: Schedule?
        var connections: [ObjectIdentifier: Connection] = [:]
        var listener: PortListener?
        var invalidationHandlers: [@Sendable () -> Void] = []
        var peerObserver: (@Sendable (PeerEvent) -> Void)?
        /// Package-internal observers beside the public one (ReceivePort+PeerWatchers.swift).
        var peerWatchers: [UInt64: @Sendable (PeerEvent) -> Void] = [:]
        /// Whether the port's connections and listener are out of the loop's modes because
        /// its iteration (`messages`) holds as much as it may, or has ended.
        var readingPaused = false
        /// Whom the listener admits (`requirePeers`); `nil`: every peer.
        var peerRequirement: PeerRequirement?
    }

    /// Makes a port.
    /// - Parameters:
    ///   - capacity: how many in-process messages may wait (default 1024).
    ///   - maxMessageBytes: the largest message accepted from another process (default 16 MiB).
    ///   - maxQueuedBytes: how much loop writes may queue per connection (default 4 MiB).
    public convenience init(
        capacity: Int = ReceivePort.defaultCapacity, maxMessageBytes: Int = ReceivePort.defaultMaxMessageBytes,
        maxQueuedBytes: Int = ReceivePort.defaultMaxQueuedBytes
    ) {
        self.init(capacity: capacity, maxMessageBytes: maxMessageBytes, maxQueuedBytes: maxQueuedBytes, maxFirstMessageBytes: nil)
    }

    /// Makes a port as `init(capacity:maxMessageBytes:maxQueuedBytes:)` does, whose peers
    /// accepted at its TCP address must begin with a message of at most
    /// `maxFirstMessageBytes` (a larger one is refused at its header, and the connection
    /// closed): for a server whose first request is small, such as the gateway's open.
    package init(capacity: Int, maxMessageBytes: Int, maxQueuedBytes: Int, maxFirstMessageBytes: Int?) {
        self.capacity = max(1, capacity)
        self.maxMessageBytes = maxMessageBytes
        self.maxQueuedBytes = max(0, maxQueuedBytes)
        self.limits = .transport(maxMessageBytes: maxMessageBytes)
        self.firstMessageLimits = maxFirstMessageBytes.map { .transport(maxMessageBytes: min($0, maxMessageBytes)) }
        self.queue = ConditionLock(LocalQueue())
    }

    /// Whether the port can still receive.
    public var isValid: Bool { state.withLock { $0.valid } }

    /// Starts delivering messages to `handler` on `loop`'s thread, in `modes`.
    ///
    /// Messages sent before the port was scheduled are delivered then. A port is scheduled
    /// once.
    /// - Throws: `.invalidPort` (the port was invalidated), `.alreadyScheduled`,
    ///   `.loop(.loopEnded)` (the loop's thread has stopped: the port is not scheduled, and stays
    ///   valid to be scheduled on another loop).
    public func schedule(
        on loop: ThreadLoop = .current, inModes modes: [LoopMode] = [.default],
        handler: @escaping @Sendable (Message) -> Message?
    ) throws(PortError) {
        try schedule(on: loop, inModes: modes, Handler(body: handler))
    }

    /// Starts delivering messages to `handler` on `loop`'s thread, in `modes`; a request
    /// comes with its `PendingReply`, to answer now or later, from any thread (a one-way
    /// message with `nil`). A reply left unanswered when its `PendingReply` goes away
    /// fails the request with `PortError.noReply`: the requester never waits in vain.
    ///
    /// - Throws: as `schedule(on:inModes:handler:)`.
    public func schedule(
        on loop: ThreadLoop = .current, inModes modes: [LoopMode] = [.default],
        deferringReplies handler: @escaping @Sendable (Message, PendingReply?) -> Void
    ) throws(PortError) {
        try schedule(on: loop, inModes: modes, Handler(deferring: handler))
    }

    func schedule(on loop: ThreadLoop, inModes modes: [LoopMode], _ handler: Handler) throws(PortError) {
        let source = LoopSource(perform: { [weak self] in self?.drainLocalQueue() })
        let (connections, listener) = try state.withLock { (state) throws(PortError) -> ([Connection], PortListener?) in
            guard state.valid else { throw .invalidPort }
            guard state.schedule == nil else { throw .alreadyScheduled }
            state.schedule = Schedule(loop: loop, modes: modes, handler: handler, source: source)
            return (Array(state.connections.values), state.listener)
        }
        scheduledLoopIdentity.store(UInt(bitPattern: loop.identity), ordering: .releasing)
        do {
            for mode in modes { try loop.add(source, forMode: mode) }
        } catch {
            // The loop has ended (or refuses the source): the port is left as it was,
            // unscheduled and valid, to be scheduled on another loop.
            for mode in modes { loop.remove(source, forMode: mode) }
            scheduledLoopIdentity.store(0, ordering: .releasing)
            state.withLock { $0.schedule = nil }
            throw .loop(.loopEnded)
        }
        for connection in connections {
            try? connection.bind(to: self, loop: loop, modes: modes, handler: handler)
            if let peer = connection.peer { report(.connected(peer)) }
        }
        listener?.start(on: loop, modes: modes, into: self)
        let pending = queue.withLock { queue -> Bool in
            guard queue.valid else { return false }
            queue.source = source
            queue.handler = handler
            return !queue.envelopes.isEmpty
        }
        if pending { source.signal() }
    }

    /// A send port for threads of this process: sending moves the message into this
    /// port's queue and wakes its loop.
    public func makeSendPort() -> SendPort { SendPort(local: self) }

    /// Runs `handler` (on the port's loop thread when scheduled) once the port is invalidated.
    public func onInvalidation(_ handler: @escaping @Sendable (ReceivePort) -> Void) {
        let now = state.withLock { state -> Bool in
            if state.valid { state.invalidationHandlers.append { [weak self] in if let self { handler(self) } } }
            return !state.valid
        }
        if now { handler(self) }
    }

    /// Stops receiving for good: queued in-process requests fail with `.invalidPort`,
    /// blocked senders wake and fail, connections close (their peers see the port die),
    /// and the invalidation handlers run. Safe from any thread, and more than once.
    public func invalidate() {
        let taken = state.withLock { state -> (Schedule?, [Connection], [@Sendable () -> Void], PortListener?)? in
            guard state.valid else { return nil }
            state.valid = false
            defer { state.connections = [:]; state.invalidationHandlers = []; state.listener = nil }
            return (state.schedule, Array(state.connections.values), state.invalidationHandlers, state.listener)
        }
        guard let (schedule, connections, handlers, listener) = taken else { return }
        listener?.close()
        let dropped = queue.withLock { queue -> [Envelope] in
            queue.valid = false
            queue.source = nil
            queue.handler = nil
            defer { queue.envelopes = [] }
            return queue.envelopes
        }
        queue.broadcast()
        for envelope in dropped {
            envelope.reply?.fail(.invalidPort)
            for fd in envelope.message.descriptors { try? FileDescriptor(rawValue: fd).close() }
        }
        schedule?.source.invalidate()
        for connection in connections { connection.close(.invalidPort) }
        let notify: @Sendable () -> Void = { for handler in handlers { handler() } }
        if let loop = schedule?.loop, !loop.isCurrent, (try? loop.perform(notify)) != nil {
        } else {
            notify()
        }
    }

    deinit { invalidate() }

    // MARK: In-process delivery

    /// Puts an envelope in the queue, waiting for room until `deadline`.
    func enqueue(_ envelope: Envelope, deadline: ContinuousClock.Instant?) throws(PortError) {
        try enqueue(envelope, timeout: { deadline })
    }

    /// Puts an envelope in the queue, waiting for room until the deadline `deadline`
    /// gives, which is asked only when the queue is full (the clock is not read for the
    /// usual send).
    func enqueue(_ envelope: Envelope, timeout deadline: () -> ContinuousClock.Instant?) throws(PortError) {
        // Room now (the usual case): one plain lock hold, no condition wait. Only the
        // message that made the queue non-empty signals: one wake per batch.
        let capacity = self.capacity
        let room = queue.withLock { queue -> Enqueued in
            guard queue.valid else { return .invalid }
            guard queue.envelopes.count < capacity else { return .full }
            queue.envelopes.append(envelope)
            return queue.envelopes.count == 1 ? .signal(queue.source) : .queued
        }
        switch room {
        case .queued: return
        case .signal(let source):
            source?.signal()
            return
        case .invalid: throw .invalidPort
        case .full: break
        }
        let outcome = queue.wait(until: deadline()) { queue -> Result<LoopSource?, PortError>? in
            guard queue.valid else { return .failure(.invalidPort) }
            guard queue.envelopes.count < capacity else {
                queue.sendersWaiting = true
                return nil
            }
            queue.envelopes.append(envelope)
            return .success(queue.envelopes.count == 1 ? queue.source : nil)
        }
        guard let outcome else { throw .sendTimedOut }
        try outcome.get()?.signal()
    }

    /// What an enqueue found.
    private enum Enqueued {
        /// Queued behind others: the loop is signalled already.
        case queued
        /// Queued first: signal this source (if the port is scheduled).
        case signal(LoopSource?)
        /// No room.
        case full
        /// The port is invalid.
        case invalid
    }

    /// The most batches one drain takes before it lets the loop serve its other work.
    private static let batchesPerDrain = 8

    /// Handles what the in-process queue holds, batch by batch: messages that arrive while a
    /// batch is handled are taken in the same drain (up to `batchesPerDrain` batches)
    /// rather than through another pass of the loop.
    private func drainLocalQueue() {
        var batch: [Envelope] = []
        defer { queue.withLock { queue in if queue.spare.capacity < batch.capacity { swap(&queue.spare, &batch) } } }
        var left: StreamSlot?
        defer { if let left { resignal(ifRoomIn: left) } }
        for _ in 0..<Self.batchesPerDrain {
            let taken = queue.withLock { queue -> (Bool, Handler?) in
                if batch.capacity < queue.spare.capacity { swap(&batch, &queue.spare) }
                // An iteration (`messages`) takes only what it has room for; the rest stays
                // queued, its senders held back by the queue's bound.
                let stream = queue.handler?.stream
                let room = stream?.room ?? .max
                if room < queue.envelopes.count {
                    batch.append(contentsOf: queue.envelopes.prefix(room))
                    queue.envelopes.removeFirst(room)
                    left = stream
                } else {
                    swap(&batch, &queue.envelopes)
                    left = nil
                }
                defer { queue.sendersWaiting = false }
                return (queue.sendersWaiting, queue.handler)
            }
            if taken.0 { queue.broadcast() }
            guard !batch.isEmpty else { return }
            guard let handler = taken.1 else {
                // Invalidated meanwhile (which empties the queue itself): fail, never drop.
                for envelope in batch {
                    envelope.reply?.fail(.invalidPort)
                    for fd in envelope.message.descriptors { try? FileDescriptor(rawValue: fd).close() }
                }
                batch.removeAll(keepingCapacity: true)
                return
            }
            // Each envelope read in place: a copy would retain and release each of its parts.
            for index in batch.indices {
                if batch[index].isCheckIn {
                    if let port = batch[index].message.replyPort {
                        checkedIn(port, id: batch[index].message.id, sender: .thisProcess, handler: handler)
                    }
                    continue
                }
                handler.handle(batch[index].message, answer: batch[index].reply.map { .local($0) })
            }
            batch.removeAll(keepingCapacity: true)
        }
    }

    /// The loop and mode of a scheduled port, if its loop is the calling thread's.
    var loopIfCurrent: (ThreadLoop, LoopMode)? {
        // The usual answer (another thread's loop, or none yet) from the atomic alone.
        let scheduled = scheduledLoopIdentity.load(ordering: .acquiring)
        guard scheduled != 0, UInt(bitPattern: ThreadLoop.currentIdentity) == scheduled else { return nil }
        let found = state.withLock { state -> (ThreadLoop, LoopMode?)? in
            guard state.schedule?.loop.isCurrent ?? false, let schedule = state.schedule else { return nil }
            return (schedule.loop, schedule.modes.first)
        }
        guard let (loop, first) = found else { return nil }
        return (loop, loop.currentMode ?? first ?? .default)
    }

    /// How long a reply may wait for room on its connection.
    public static let replySendTimeout: Duration = .seconds(10)
}
