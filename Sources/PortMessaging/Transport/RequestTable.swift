import PermanentThread

/// The requests in flight on one connection, who reads their replies, and the
/// connection's life (open, or closed and why). Several may wait at once, from any
/// threads, each for the reply with its own sequence number; replies are matched by that
/// number, in whatever order they come.
struct RequestTable {
    private struct Slot {
        let sequence: UInt64
        var result: Result<Message, PortError>?
        /// The suspended task of an async request, resumed with the reply instead of
        /// storing it.
        var waiter: AsyncReply?
        /// When an async request's wait ends with `receiveTimedOut`, if its reply is not in.
        var deadline: ContinuousClock.Instant?
    }

    private var nextSequence: UInt64 = 1
    /// In the order sent; usually one, so a search is a look at the only entry.
    private var slots: [Slot] = []
    /// The connection's life (`Connection.withLife`), kept here to share the table's lock.
    var life = Connection.Life.open(.init())
    /// Why the connection failed, once closed: what every request without a reply gets.
    var failure: PortError? {
        if case .closed(let reason, _) = life { reason } else { nil }
    }
    /// Who reads the connection, when no receive port's loop does (`ReplyReader`).
    var reader = ReplyReader.nobody

    /// The timer on the reply loop that ends async requests at their deadlines, and the
    /// date it fires: one for the connection, at the earliest deadline (see `setDeadline`).
    var deadlineTimer: (date: ContinuousClock.Instant, timer: LoopTimer)?

    /// What `complete` did with a reply.
    enum Completion {
        /// Stored for its (blocked) requester: wake it.
        case stored
        /// For an async request: resume it with the reply (its slot is gone).
        case resume(AsyncReply)
        /// No request waits for it.
        case unclaimed
    }

    /// Registers a request (async when `waiter` is given); returns its sequence number.
    mutating func begin(waiter: AsyncReply? = nil) -> UInt64 {
        let sequence = nextSequence
        nextSequence = nextSequence == .max ? 1 : nextSequence + 1
        slots.append(Slot(sequence: sequence, waiter: waiter))
        return sequence
    }

    /// Stores the reply (or refusal) of request `sequence`, or takes the async waiter it is
    /// for; `.unclaimed` when no request waits for it (it gave up, or never was).
    mutating func complete(_ sequence: UInt64, with result: Result<Message, PortError>) -> Completion {
        guard sequence != 0, let index = index(of: sequence), case .none = slots[index].result else { return .unclaimed }
        if let waiter = slots[index].waiter {
            slots.remove(at: index)
            return .resume(waiter)
        }
        slots[index].result = result
        return .stored
    }

    /// The async waiters, to be failed with `failure` as the connection closes.
    var asyncWaiters: [AsyncReply] { slots.compactMap(\.waiter) }

    /// Sets async request `sequence`'s deadline, and returns the timer (made by `timer`) the
    /// caller must arm at `deadline` when no armed timer fires by then; it is recorded as
    /// the armed one. A request whose deadline is no earlier than the armed timer's arms
    /// nothing: a stream of requests with the same time-out sets one timer, not one each
    /// (and wakes the reply loop once, not once per request). An armed timer whose date has
    /// passed is not counted on (its loop may have ended before it fired).
    mutating func setDeadline(_ deadline: ContinuousClock.Instant, of sequence: UInt64, timer: () -> LoopTimer) -> LoopTimer? {
        guard let index = index(of: sequence), slots[index].waiter != nil else { return nil }
        slots[index].deadline = deadline
        if let armed = deadlineTimer, armed.date <= deadline, armed.date > .now { return nil }
        let made = timer()
        deadlineTimer = (deadline, made)
        return made
    }

    /// The timer to arm on another loop for the earliest deadline of the async requests
    /// waiting (`nil` when none has one), recorded as the armed one: the armed timer went
    /// with the loop that ended.
    mutating func rearmDeadline(timer: (ContinuousClock.Instant) -> LoopTimer) -> LoopTimer? {
        deadlineTimer = nil
        let earliest = slots.lazy.filter { $0.waiter != nil }.compactMap(\.deadline).min()
        guard let earliest else { return nil }
        let made = timer(earliest)
        deadlineTimer = (earliest, made)
        return made
    }

    /// The deadline timer `fired` at `now`: the async waiters that are due (their requests
    /// forgotten: a reply that comes later is dropped), and the timer to arm for the earliest deadline still ahead, if
    /// the timer that fired was the armed one.
    mutating func takeDue(
        at now: ContinuousClock.Instant, fired: LoopTimer, timer: (ContinuousClock.Instant) -> LoopTimer
    ) -> (due: [AsyncReply], next: LoopTimer?) {
        var due: [AsyncReply] = []
        var earliest: ContinuousClock.Instant?
        slots.removeAll { slot in
            guard let deadline = slot.deadline, let waiter = slot.waiter else { return false }
            if deadline <= now {
                due.append(waiter)
                return true
            }
            if earliest.map({ deadline < $0 }) ?? true { earliest = deadline }
            return false
        }
        guard deadlineTimer?.timer === fired else { return (due, nil) }
        deadlineTimer = nil
        guard let earliest else { return (due, nil) }
        let next = timer(earliest)
        deadlineTimer = (earliest, next)
        return (due, next)
    }

    /// The reply to `sequence` if it is in (taken out, unless `peek`), else the failure if
    /// any, else `nil`.
    mutating func outcome(_ sequence: UInt64, peek: Bool = false) -> Result<Message, PortError>? {
        if let index = index(of: sequence), let result = slots[index].result {
            if !peek { slots[index].result = nil }
            return result
        }
        return failure.map { .failure($0) }
    }

    /// Forgets request `sequence`; returns a reply that came but was not taken (too late).
    mutating func end(_ sequence: UInt64) -> Result<Message, PortError>? {
        guard let index = index(of: sequence) else { return nil }
        return slots.remove(at: index).result
    }

    private func index(of sequence: UInt64) -> Int? {
        // From the newest: a request usually ends before the next begins.
        var index = slots.count - 1
        while index >= 0 {
            if slots[index].sequence == sequence { return index }
            index -= 1
        }
        return nil
    }
}

extension Connection {
    // MARK: Requests

    /// Registers one request, whose reply is matched to it by the sequence number returned;
    /// any number may be in flight at once. `endRequest(_:)` forgets it. An async request
    /// passes its `waiter`, which the reply resumes.
    func beginRequest(waiter: AsyncReply? = nil) -> UInt64 {
        replies.withLock { $0.begin(waiter: waiter) }
    }

    /// Forgets request `sequence`: a reply that came too late is dropped (its descriptors
    /// closed), and one still to come will be.
    func endRequest(_ sequence: UInt64) {
        let late = replies.withLock { $0.end(sequence) }
        if case .success(let message) = late { discard(message) }
    }

    /// Hands request `sequence` its reply or refusal; a reply no request waits for is
    /// dropped (its descriptors closed).
    func complete(_ sequence: UInt64, with result: Result<Message, PortError>) {
        switch replies.withLock({ $0.complete(sequence, with: result) }) {
        case .stored: replies.broadcast()
        case .resume(let waiter):
            if !waiter.finish(result), case .success(let message) = result { discard(message) }
        case .unclaimed:
            if case .success(let message) = result { discard(message) }
        }
    }
}
