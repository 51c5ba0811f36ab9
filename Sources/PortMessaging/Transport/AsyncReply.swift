import Glibc
import PermanentThread
import PortKitLocks

/// One async request's wait for its reply: a suspended task (or a completion handler),
/// resumed (called) exactly once by whichever comes first of its reply (or refusal), its
/// receive timeout, its task's cancellation, or its connection's close. No thread waits:
/// the thread that brings the outcome (the loop that read the reply, the loop whose timer
/// fired, the cancelling thread) resumes the task.
///
///     pending ──continuation kept──▶ parked ──outcome──▶ over (resumed with it)
///        │
///        └──outcome first──▶ early ──continuation kept──▶ over (resumed at once)
///
///     handler ──outcome──▶ over (the handler called with it)
final class AsyncReply: Sendable {
    typealias Outcome = Result<Message, PortError>

    private enum Phase {
        /// Neither the task's continuation nor an outcome is in yet.
        case pending
        /// The task is suspended on this continuation.
        case parked(UnsafeContinuation<Outcome, Never>)
        /// The outcome came before the task suspended.
        case early(Outcome)
        /// A completion handler waits instead of a task (`SendPort.request(_:…:completion:)`).
        case handler(@Sendable (Outcome) -> Void)
        /// The task was resumed (or is about to be, with the early outcome).
        case over
    }

    /// The phase, and the receive timeout's timer (invalidated when the wait ends
    /// otherwise), behind one lock: a request allocates one lock for its wait.
    private let state: Locked<(phase: Phase, timer: LoopTimer?)>

    /// A wait for a task, which `outcome()` suspends.
    init() { state = Locked((.pending, nil)) }

    /// A wait that calls `handler` with the outcome, on the thread that brings it.
    init(handler: @escaping @Sendable (Outcome) -> Void) { state = Locked((.handler(handler), nil)) }

    /// Ends the wait with `outcome`; false (nothing done) when it had ended already, in which
    /// case a reply in `outcome` is the caller's to discard.
    @discardableResult
    func finish(_ outcome: Outcome) -> Bool {
        enum Resume {
            case none, task(UnsafeContinuation<Outcome, Never>), handler(@Sendable (Outcome) -> Void)
        }
        let (won, resume, timer) = state.withLock { state -> (Bool, Resume, LoopTimer?) in
            let resume: Resume
            switch state.phase {
            case .pending:
                state.phase = .early(outcome)
                resume = .none
            case .parked(let continuation):
                state.phase = .over
                resume = .task(continuation)
            case .handler(let handler):
                state.phase = .over
                resume = .handler(handler)
            case .early, .over:
                return (false, .none, nil)
            }
            return (true, resume, state.timer.take())
        }
        guard won else { return false }
        timer?.invalidate()
        switch resume {
        case .none: break
        case .task(let continuation): continuation.resume(returning: outcome)
        case .handler(let handler): handler(outcome)
        }
        return true
    }

    /// Ends the wait with no outcome (the request was never sent): false when an outcome
    /// came first, and was handed over.
    func abandon() -> Bool {
        state.withLock { state -> Bool in
            switch state.phase {
            case .over: return false
            default:
                state.phase = .over
                return true
            }
        }
    }

    /// Ends the wait with `receiveTimedOut` at `deadline` (none: never), by a timer on
    /// `loop`, else on the shared reply loop (when `loop` is `nil` or has ended).
    func timeOut(at deadline: ContinuousClock.Instant?, on loop: ThreadLoop?) throws(PortError) {
        guard let deadline else { return }
        let timer = LoopTimer(fireAt: deadline) { [self] _ in finish(.failure(.receiveTimedOut)) }
        state.withLock { $0.timer = timer }
        if (try? loop?.add(timer, forMode: .common)) == nil {
            let shared = try SharedReplyLoop.loop()
            do { try shared.add(timer, forMode: .common) } catch { throw .invalidPort }
        }
        // Ended meanwhile, before the timer was kept: nothing else will invalidate it.
        let ended = state.withLock { state -> LoopTimer? in
            switch state.phase {
            case .pending, .parked, .handler: nil
            case .early, .over: state.timer.take()
            }
        }
        ended?.invalidate()
    }

    /// Suspends the calling task until the wait ends, and returns how. Cancelling the task
    /// ends it at once with `cancelled`.
    nonisolated(nonsending) func outcome() async -> Outcome {
        await withTaskCancellationHandler {
            // Unsafe (no checking allocation per wait): the phase resumes it exactly once.
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Outcome, Never>) in
                let early = state.withLock { state -> Outcome? in
                    guard case .early(let outcome) = state.phase else {
                        state.phase = .parked(continuation)
                        return nil
                    }
                    state.phase = .over
                    return outcome
                }
                if let early { continuation.resume(returning: early) }
            }
        } onCancel: {
            finish(.failure(.cancelled))
        }
    }
}
