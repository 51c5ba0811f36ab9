import PortKitLocks

/// The life of one `PermanentThread.submit` call: who resumes the awaiting task, the
/// block or a cancellation, decided under one lock so that exactly one of them does.
///
///     unqueued ──continuation kept──▶ queued ──block starts──▶ running (the block resumes)
///        │                              │
///        └────────cancelled─────────────┴──────────────────▶ over (CancellationError)
///
/// A cancellation once the block runs changes nothing: the block finishes and its result
/// is returned.
// Safety of @unchecked Sendable: `phase` is only reached inside its lock.
final class SubmittedBlock<T: Sendable>: @unchecked Sendable {
    private enum Phase {
        /// The awaiting task has not given its continuation yet.
        case unqueued
        /// The block waits in the thread's queue.
        case queued(CheckedContinuation<T, any Error>)
        /// The block started; it resumes the task itself.
        case running
        /// The task was resumed without the block (cancelled, or refused).
        case over
    }

    private let phase = Locked(Phase.unqueued)

    /// Keeps the task's continuation; false (and nothing kept) if the task was cancelled
    /// first, in which case the caller resumes it with `CancellationError`.
    func keep(_ continuation: CheckedContinuation<T, any Error>) -> Bool {
        phase.withLock { phase in
            guard case .unqueued = phase else { return false }
            phase = .queued(continuation)
            return true
        }
    }

    /// Called by the block as it starts: the continuation to resume with its result, or
    /// `nil` if the task was cancelled meanwhile (the block must not run).
    func start() -> CheckedContinuation<T, any Error>? {
        take(becoming: .running)
    }

    /// The task was cancelled: resumes it with `CancellationError` unless the block started.
    func cancel() {
        phase.withLock { phase in
            if case .unqueued = phase { phase = .over }
        }
        take(becoming: .over)?.resume(throwing: CancellationError())
    }

    /// The thread refused the block: resumes the task with `error`, unless already resumed.
    func refuse(_ error: any Error) {
        take(becoming: .over)?.resume(throwing: error)
    }

    private func take(becoming next: Phase) -> CheckedContinuation<T, any Error>? {
        phase.withLock { phase in
            guard case .queued(let continuation) = phase else { return nil }
            phase = next
            return continuation
        }
    }
}
