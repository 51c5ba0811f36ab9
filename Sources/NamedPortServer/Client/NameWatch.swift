import Glibc
import PermanentThread
import PortMessaging
import PortKitLocks

/// A watch on a name or a prefix: the owners there were when it started, then every
/// appearance and disappearance after that, in the order the server saw them.
///
/// The server takes the snapshot and starts the subscription in the same step, so no
/// change falls between `initialOwners` and the first event, and none is missed after.
/// The events are messages to a port of the watch's own, scheduled on the loop of the
/// thread that started the watch; they queue until `next(timeout:)` takes them.
///
/// A watch of a reconnecting client (`reconnectingOn:`) outlives
/// its server: when the client has reconnected, the watch starts again on the new server
/// and reports what changed meanwhile, as events, by comparing the owners it reported
/// with the new server's: a `vanished` for each name gone (or now held by another owner),
/// then an `appeared` for each new one, nothing for a name held as before. No change is
/// reported twice and none is left out; while the server is away `next` simply waits.
public final class NameWatch: Sendable {
    /// The prefix watched (the empty string watches every name), or the name when `isExact`.
    public let prefix: String
    /// Whether the watch is on exactly the name `prefix` rather than on a prefix.
    public let isExact: Bool
    /// The names matching when the watch started, sorted by name.
    public let initialOwners: [NameOwner]
    private let events: WatchEvents

    init(prefix: String, exact: Bool, initialOwners: [NameOwner], events: WatchEvents) {
        self.prefix = prefix
        self.isExact = exact
        self.initialOwners = initialOwners
        self.events = events
    }

    deinit {
        cancel()
    }

    /// The next event, waiting for it up to `timeout` (`nil`: for ever).
    ///
    /// Called on the thread that started the watch, it runs that thread's loop while it
    /// waits (the watch's port is scheduled there); on another thread it waits for that
    /// loop, which must then be running (a `PermanentThread`'s, say), to hand the events
    /// over. Events wait in a queue until taken (at most 100 000; past that the watch ends
    /// with `limitExceeded`).
    /// - Returns: the event, or `nil` when the time is up or the watch was cancelled.
    /// - Throws: `connectionLost` once the server is gone or ended the watch (after the
    ///   events that came before the end; a reconnecting client's watch resumes instead),
    ///   `limitExceeded` when too many were left unread.
    public func next(timeout: Duration? = nil) throws(NameServerError) -> NameEvent? {
        try events.next(deadline: timeout.map { ContinuousClock.now + $0 })
    }

    /// Ends the watch: its port is closed, which the server sees and stops sending its
    /// events; `next` returns `nil`. Safe to call more than once, from any thread.
    public func cancel() {
        events.end()
    }
}

extension NameWatch: AsyncSequence {
    /// Each event of the watch, in order: `for try await event in watch { … }`.
    public typealias Element = NameEvent
    /// Why the events ended: the server went (`connectionLost`), too many were left unread
    /// (`limitExceeded`), or the iterating task was cancelled (`transport(.cancelled)`).
    public typealias Failure = NameServerError

    /// Iterates a watch's events.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let watch: NameWatch

        /// The next event, suspending the task until it comes; `nil` once the watch is
        /// cancelled (`NameWatch.cancel()`).
        public mutating func next() async throws(NameServerError) -> NameEvent? {
            try await watch.events.nextEvent()
        }

        /// The next event, as `next()`.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(NameServerError) -> NameEvent? {
            try await watch.events.nextEvent()
        }
    }

    /// An iterator over the events. The watch's port must be on a loop that runs: a watch
    /// made by the async `watch(prefix:)` has it on the process's shared reply loop;
    /// `blockingWatch(prefix:)`'s is on its thread's loop, which must then be running.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(watch: self) }
}

/// The receiving side of a watch: its port and the queue its handler fills.
///
/// A reconnecting client resumes a watch whose server went away: each resumption is a new
/// generation with a port of its own. Events of an older generation are dropped (the new
/// snapshot covers them); events of the new one that come before its snapshot is applied
/// are held, then queued behind the changes the snapshot shows (`changes(from:to:)`).
final class WatchEvents: Sendable {
    /// The prefix or the name watched.
    let text: String
    /// Whether the watch is on exactly the name `text`.
    let exact: Bool
    private let loop: ThreadLoop
    private let address: String
    private let queue = ConditionLock(Queue())
    /// The port of the current generation.
    private let current: Locked<ReceivePort?> = Locked(nil)
    /// The reconnecting client that resumes the watch; empty for a client that does not
    /// reconnect (the watch ends when its server connection does).
    private let client: ClientReference
    /// Signalled when another thread than the port's handler changes the queue (a
    /// resumption's changes, an end): `next`, running the loop on the watch's thread,
    /// returns from its run to look.
    private let wake = LoopSource(perform: {})

    struct Queue {
        var events: [NameEvent] = []
        var head = 0
        /// Why no event comes any more: `nil` while the watch lasts.
        var end: NameServerError?
        var cancelled = false
        /// The owners the queued events leave, name by name: what the watch has reported.
        var owners: [String: NameOwner] = [:]
        /// The current generation: 0 for the first watch request, one more per resumption.
        var generation = 0
        /// Events of the current generation that came before its snapshot was applied;
        /// `nil` once it is.
        var held: [NameEvent]? = []
        /// Whether the current generation's server connection closed.
        var interrupted = false
        /// Tasks suspended in `nextEvent()`, by their wait's number.
        var tasks: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextTask: UInt64 = 0

        /// Whether `take` has something to give: an event, the end, or the cancellation.
        var hasNext: Bool { cancelled || head < events.count || end != nil }

        /// Queues `event` and follows it in `owners`; false when the queue is full.
        mutating func enqueue(_ event: NameEvent) -> Bool {
            guard events.count - head < WatchEvents.maxQueuedEvents else { return false }
            events.append(event)
            switch event {
            case .appeared(let owner): owners[owner.name] = owner
            case .vanished(let owner): owners[owner.name] = nil
            }
            return true
        }
    }

    /// The most events that wait unread before the watch ends.
    static let maxQueuedEvents = 100_000

    /// The mode `next` runs the loop in while it waits: only the watch's port is in it.
    private static let waitMode = LoopMode("portkit.names.watch")

    /// Schedules a port for the events on `loop` (`nil`: the calling thread's).
    init(address: String, text: String, exact: Bool, client: NameServerClient?, loop: ThreadLoop? = nil) throws(NameServerError) {
        self.address = address
        self.text = text
        self.exact = exact
        self.client = ClientReference(client: client)
        if let loop {
            self.loop = loop
        } else {
            do throws(ThreadLoopError) {
                self.loop = try ThreadLoop.forCurrentThread()
            } catch {
                throw .transport(.loop(error))
            }
        }
        let port = try makePort(generation: 0)
        current.withLock { $0 = port }
        try? self.loop.add(wake, forMode: Self.waitMode)
    }

    deinit {
        wake.invalidate()
    }

    /// Wakes whoever waits in `next`: a thread waiting on the queue, or the watch's loop,
    /// and the tasks waiting in `nextEvent()`.
    private func broadcast() {
        queue.broadcast()
        wake.signal()
        resumeTasks()
    }

    /// Resumes the tasks waiting for an event; each looks at the queue again.
    private func resumeTasks() {
        let waiting = queue.withLock { queue -> [CheckedContinuation<Void, Never>] in
            defer { queue.tasks = [:] }
            return Array(queue.tasks.values)
        }
        for task in waiting { task.resume() }
    }

    /// The port the server sends the current generation's events to.
    var port: ReceivePort { current.withLock { $0! } }

    /// A port for a generation's events, scheduled on the watch's loop.
    private func makePort(generation: Int) throws(NameServerError) -> ReceivePort {
        let port = ReceivePort()
        // The server's connection into the port ending: the server went, or it ended the
        // watch (this side read too slowly).
        port.onPeerEvent { [weak self] event in
            if case .disconnected = event { self?.disconnected(generation: generation) }
        }
        do {
            try port.schedule(on: loop, inModes: [.default, Self.waitMode]) { [weak self] message in
                self?.received(message, generation: generation)
                return nil
            }
        } catch {
            throw .transport(error)
        }
        return port
    }

    private func received(_ message: Message, generation: Int) {
        let owner: NameOwner
        var fields = NameFieldReader(message.components)
        do throws(NameServerError) {
            owner = NameOwner(
                name: try fields.string(), pid: try fields.pid(), uid: try fields.uid(), node: fields.atEnd ? nil : try fields.string())
        } catch {
            return fail(error)
        }
        let event: NameEvent = message.id == NameNotice.vanished.rawValue ? .vanished(owner) : .appeared(owner)
        let overflow = queue.withLock { queue -> Bool in
            guard queue.end == nil, queue.generation == generation else { return false }
            guard queue.held == nil else {
                queue.held?.append(event)
                return queue.held!.count > Self.maxQueuedEvents
            }
            return !queue.enqueue(event)
        }
        if overflow {
            fail(.limitExceeded(what: "unread watch events", limit: Self.maxQueuedEvents))
        } else {
            queue.broadcast()
            resumeTasks()
        }
    }

    private func disconnected(generation: Int) {
        guard let client = client.client else { return fail(.connectionLost(address: address)) }
        let interrupted = queue.withLock { queue -> Bool in
            guard queue.generation == generation, queue.end == nil, !queue.cancelled else { return false }
            queue.interrupted = true
            return true
        }
        if interrupted { client.watchInterrupted(self) }
    }

    /// Whether the current generation's server connection closed, and no resumption began.
    var isInterrupted: Bool { queue.withLock { $0.interrupted && $0.end == nil && !$0.cancelled } }

    /// Starts a new generation with a port of its own, for a resumption: the old port
    /// closes, and what it still receives is dropped. `nil` if the watch has ended.
    func prepareResume() -> Int? {
        guard let generation = queue.withLock({ queue -> Int? in
            guard queue.end == nil, !queue.cancelled else { return nil }
            queue.generation += 1
            queue.held = []
            queue.interrupted = false
            return queue.generation
        }) else { return nil }
        let port: ReceivePort
        do {
            port = try makePort(generation: generation)
        } catch {
            fail(error)
            return nil
        }
        current.withLock { $0 }?.invalidate()
        current.withLock { $0 = port }
        return generation
    }

    /// The snapshot of generation `generation` arrived: the changes from what the watch
    /// reported to it are queued, then the events held meanwhile. The first generation's
    /// snapshot is the watch's `initialOwners`, which queues nothing.
    func resumed(generation: Int, owners: [NameOwner]) {
        let overflow = queue.withLock { queue -> Bool in
            guard queue.generation == generation, queue.end == nil, let held = queue.held else { return false }
            queue.held = nil
            if generation == 0 {
                queue.owners = Dictionary(owners.map { ($0.name, $0) }, uniquingKeysWith: { $1 })
            } else {
                for change in Self.changes(from: queue.owners, to: owners) where !queue.enqueue(change) { return true }
            }
            for event in held where !queue.enqueue(event) { return true }
            return false
        }
        if overflow { fail(.limitExceeded(what: "unread watch events", limit: Self.maxQueuedEvents)) }
        broadcast()
    }

    /// What turns the owners a watch reported into `current`: a `vanished` for each name
    /// gone or held by another owner now (in name order), then an `appeared` for each name
    /// new or held by another owner (in name order); nothing for a name held as before.
    static func changes(from reported: [String: NameOwner], to current: [NameOwner]) -> [NameEvent] {
        let now = Dictionary(current.map { ($0.name, $0) }, uniquingKeysWith: { $1 })
        let gone = reported.values.filter { now[$0.name] != $0 }.sorted { $0.name < $1.name }
        let new = current.filter { reported[$0.name] != $0 }.sorted { $0.name < $1.name }
        return gone.map(NameEvent.vanished) + new.map(NameEvent.appeared)
    }

    /// The next event from `queue`, the watch's end, or `nil` while neither is there.
    private static func take(_ queue: inout Queue) -> Result<NameEvent?, NameServerError>? {
        if queue.cancelled { return .success(nil) }
        if queue.head < queue.events.count {
            defer {
                queue.head += 1
                if queue.head == queue.events.count { queue.events.removeAll(keepingCapacity: true); queue.head = 0 }
            }
            return .success(queue.events[queue.head])
        }
        if let end = queue.end { return .failure(end) }
        return nil
    }

    /// The next event, suspending the task until it comes (no thread waits: the watch's
    /// loop resumes it); `nil` once the watch is cancelled.
    /// - Throws: `transport(.cancelled)` when the task is, and what `next(deadline:)` throws.
    func nextEvent() async throws(NameServerError) -> NameEvent? {
        while true {
            if let outcome = queue.withLock(Self.take) { return try outcome.get() }
            if Task.isCancelled { throw .transport(.cancelled) }
            let number = queue.withLock { queue -> UInt64 in
                defer { queue.nextTask += 1 }
                return queue.nextTask
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    // Registered under the lock that `received` takes to queue: an event is
                    // either seen now or resumes this wait.
                    let ready = queue.withLock { queue -> Bool in
                        if queue.hasNext || Task.isCancelled { return true }
                        queue.tasks[number] = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                queue.withLock { $0.tasks.removeValue(forKey: number) }?.resume()
            }
        }
    }

    /// The next event, or `nil` at the deadline or once cancelled.
    func next(deadline: ContinuousClock.Instant?) throws(NameServerError) -> NameEvent? {
        let take = Self.take
        if loop.isCurrent {
            while true {
                if let outcome = queue.withLock(take) { return try outcome.get() }
                if let deadline, ContinuousClock.now >= deadline { return nil }
                do throws(PortError) {
                    try loop.runForWait(in: Self.waitMode, until: deadline)
                } catch {
                    throw .transport(error)
                }
            }
        }
        guard let outcome = queue.wait(until: deadline, take) else { return nil }
        return try outcome.get()
    }

    /// Ends the watch with `error`, after the events queued before it.
    func fail(_ error: NameServerError) {
        queue.withLock { if $0.end == nil { $0.end = error } }
        broadcast()
    }

    /// Ends the watch: the port goes (the server sees it), and `next` returns `nil`.
    func end() {
        queue.withLock { $0.cancelled = true }
        broadcast()
        current.withLock { $0 }?.invalidate()
    }
}
