import PortKitLocks

/// The life of one `PermanentThread.submit` call: who resumes the awaiting task, the
/// block or a cancellation, decided under one lock so that exactly one of them does.
///
///     unqueued ──continuation kept──▶ queued ──block starts──▶ running (the block resumes)
///        │                              │
///        └────────cancelled─────────────┴──────────────────▶ over (.cancelledBeforeStart)
///
/// A cancellation once the block runs changes nothing: the block finishes and its result
/// is returned.
// Safety of @unchecked Sendable: `phase` is only reached inside its lock.
final class SubmittedBlock<T: Sendable, Failure: Error>: @unchecked Sendable {
    /// How the awaiting task is resumed: with the block's outcome, or the thread's refusal.
    typealias Continuation = CheckedContinuation<Result<T, ThreadCallError<Failure>>, Never>

    private enum Phase {
        /// The awaiting task has not given its continuation yet.
        case unqueued
        /// The block waits in the thread's queue.
        case queued(Continuation)
        /// The block started; it resumes the task itself.
        case running
        /// The task was resumed without the block (cancelled, or refused).
        case over
    }

    private let phase = Locked(Phase.unqueued)

    /// Keeps the task's continuation; false (and nothing kept) if the task was cancelled
    /// first, in which case the caller resumes it with `.cancelledBeforeStart`.
    func keep(_ continuation: Continuation) -> Bool {
        phase.withLock { phase in
            guard case .unqueued = phase else { return false }
            phase = .queued(continuation)
            return true
        }
    }

    /// Called by the block as it starts: the continuation to resume with its result, or
    /// `nil` if the task was cancelled meanwhile (the block must not run).
    func start() -> Continuation? {
        take(becoming: .running)
    }

    /// The task was cancelled: resumes it with `.cancelledBeforeStart` unless the block started.
    func cancel() {
        phase.withLock { phase in
            if case .unqueued = phase { phase = .over }
        }
        take(becoming: .over)?.resume(returning: .failure(.thread(.cancelledBeforeStart)))
    }

    /// The thread refused the block: resumes the task with `error`, unless already resumed.
    func refuse(_ error: PermanentThreadError) {
        take(becoming: .over)?.resume(returning: .failure(.thread(error)))
    }

    private func take(becoming next: Phase) -> Continuation? {
        phase.withLock { phase in
            guard case .queued(let continuation) = phase else { return nil }
            phase = next
            return continuation
        }
    }
}
