/// The requests in flight on one connection and why it failed. Several may wait at once,
/// from any threads, each for the reply with its own sequence number; replies are matched
/// by that number, in whatever order they come.
struct RequestTable {
    private struct Slot {
        let sequence: UInt64
        var result: Result<Message, PortError>?
    }

    private var nextSequence: UInt64 = 1
    /// In the order sent; usually one, so a search is a look at the only entry.
    private var slots: [Slot] = []
    /// Why the connection failed: what every request without a reply gets.
    var failure: PortError?
    /// Whether a waiting requester reads the (unbound) connection for all of them now: the
    /// others wait for it to hand their replies over (only one thread may wait in the read).
    var readerActive = false

    /// Registers a request; returns its sequence number.
    mutating func begin() -> UInt64 {
        let sequence = nextSequence
        nextSequence = nextSequence == .max ? 1 : nextSequence + 1
        slots.append(Slot(sequence: sequence))
        return sequence
    }

    /// Stores the reply (or refusal) of request `sequence`; false when no request waits for
    /// it (it gave up, or never was).
    mutating func complete(_ sequence: UInt64, with result: Result<Message, PortError>) -> Bool {
        guard sequence != 0, let index = index(of: sequence), case .none = slots[index].result else { return false }
        slots[index].result = result
        return true
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
