import PermanentThread
import Synchronization
import PortKitSystem
import PortKitLocks

/// Where an in-process request's reply goes: filled once, waited on by the requester —
/// blocked on the slot, or (an async request) suspended in the slot's `AsyncReply`, which
/// the reply resumes.
///
/// A blocked requester sleeps on a `DoneWord`, which the reply's thread wakes only if the
/// requester said it sleeps: no mutex or condition variable is made per request, and a
/// reply that comes before the requester waits costs no system call.
// Safety of @unchecked Sendable: `stored` is written once, by the one thread that won the
// claim, before it marks `done` (release); it is read only after `done` is seen done
// (acquire).
final class ReplySlot: @unchecked Sendable {
    private var stored: Result<Message, PortError>?
    /// Done once a result is stored.
    private let done = DoneWord(done: false)
    /// Set once a result is being stored: the first `fulfil` or `fail` wins.
    private let claimed = Atomic<Bool>(false)
    /// The suspended task of an async request.
    let waiter: AsyncReply?

    init(waiter: AsyncReply? = nil) {
        self.waiter = waiter
    }

    deinit { done.deallocate() }

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
        // The first result stays.
        guard claimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        stored = result
        done.markDone()
    }

    /// The result, once there is one.
    var result: Result<Message, PortError>? { done.isDone ? stored : nil }

    /// Waits until the result is in, for at most `timeout` (`nil`: no limit); the result,
    /// or `nil` on time-out. One thread waits on a slot: its requester.
    func wait(timeout: Duration?) -> Result<Message, PortError>? {
        done.wait(timeout: timeout) ? stored : nil
    }
}
