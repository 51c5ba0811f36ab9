import CPortKitSystem
import PermanentThread

/// Where an in-process request's reply goes: filled once, waited on by the requester —
/// blocked on the slot, or (an async request) suspended in the slot's `AsyncReply`, which
/// the reply resumes.
///
/// A blocked requester sleeps on a futex word, which the reply's thread wakes only if the
/// requester said it sleeps: no mutex or condition variable is made per request, and a
/// reply that comes before the requester waits costs no system call.
// Safety of @unchecked Sendable: `stored` is written once, by the one thread that won the
// claim word, before it publishes `done` on the state word (release); it is read only after
// `done` was loaded (acquire). The words are touched only through the C atomics and futex.
final class ReplySlot: @unchecked Sendable {
    private var stored: Result<Message, PortError>?
    /// Two words: the state (`State`), which the requester sleeps on, and the claim (0 until
    /// a result is being stored: the first `fulfil` or `fail` wins).
    private let words: UnsafeMutablePointer<UInt32>
    /// The suspended task of an async request.
    let waiter: AsyncReply?

    /// The state word's values.
    private enum State {
        static let pending: UInt32 = 0
        static let done: UInt32 = 1
        /// The requester sleeps on the word (or is about to): the reply must wake it.
        static let sleeping: UInt32 = 2
    }

    init(waiter: AsyncReply? = nil) {
        self.waiter = waiter
        words = .allocate(capacity: 2)
        words.initialize(repeating: 0, count: 2)
    }

    deinit {
        words.deinitialize(count: 2)
        words.deallocate()
    }

    private var state: UnsafeMutablePointer<UInt32> { words }
    private var claim: UnsafeMutablePointer<UInt32> { words + 1 }

    func fulfil(_ message: Message) {
        var reply = message
        reply.sender = .thisProcess
        set(.success(reply))
    }
    func fail(_ error: PortError) { set(.failure(error)) }

    private func set(_ result: Result<Message, PortError>) {
        if let waiter {
            // A reply the task no longer waits for (cancelled, timed out) is dropped.
            if !waiter.finish(result), case .success(let message) = result { FileDescriptor.close(message.descriptors) }
            return
        }
        guard portkit_word_compare_exchange(claim, 0, 1) else { return }  // the first result stays
        stored = result
        if portkit_word_exchange(state, State.done) == State.sleeping { portkit_futex_wake_one(state) }
    }

    /// The result, once there is one.
    var result: Result<Message, PortError>? {
        portkit_word_load(state) == State.done ? stored : nil
    }

    /// Waits until the result is in or `deadline` passes (`nil`: no deadline); the result,
    /// or `nil` on time-out. One thread waits on a slot: its requester.
    func wait(until deadline: ContinuousClock.Instant?) -> Result<Message, PortError>? {
        while true {
            let now = portkit_word_load(state)
            if now == State.done { return stored }
            if now == State.pending && !portkit_word_compare_exchange(state, State.pending, State.sleeping) { continue }
            var timeout: Int64 = -1
            if let deadline {
                let left = deadline - .now
                if left <= .zero { return nil }
                let (seconds, attoseconds) = left.components
                // A day at most per sleep: the loop sleeps again until the deadline.
                timeout = min(seconds, 86_400) * 1_000_000_000 + attoseconds / 1_000_000_000
            }
            _ = portkit_futex_wait_while_for(state, State.sleeping, timeout)
        }
    }
}
