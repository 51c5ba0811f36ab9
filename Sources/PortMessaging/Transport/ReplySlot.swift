import PermanentThread

/// Where an in-process request's reply goes: filled once, waited on by the requester —
/// blocked on the slot, or (an async request) suspended in the slot's `AsyncReply`, which
/// the reply resumes.
final class ReplySlot: Sendable {
    private let slot = ConditionLock<Result<Message, PortError>?>(nil)
    /// The suspended task of an async request.
    let waiter: AsyncReply?

    init(waiter: AsyncReply? = nil) {
        self.waiter = waiter
    }

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
        slot.withLock { if $0 == nil { $0 = result } }
        slot.broadcast()
    }

    var result: Result<Message, PortError>? { slot.withLock { $0 } }

    func wait(until deadline: ContinuousClock.Instant?) -> Result<Message, PortError>? {
        slot.wait(until: deadline) { $0 }
    }
}
