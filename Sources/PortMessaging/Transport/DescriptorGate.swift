import Synchronization

/// Who is using a connection's descriptors, so that closing the connection never releases a
/// descriptor a writer or reader is still in a system call with: the number would be free
/// for reuse, and that call (a frame's write, say) could reach an unrelated file or peer.
///
/// Every system call on the descriptors runs between `enter()` and `leave()`. Closing does
/// not wait for those users: the last one out of a closed gate releases the descriptors (the
/// closer is a user itself, so one always leaves after the close). The state is one word,
/// `2 × users + closed`, so exactly one caller sees it become "closed, no user" and
/// releases, whatever the race.
struct DescriptorGate: ~Copyable {
    private let state = Atomic<Int>(0)

    /// Becomes a user of the descriptors; false once the gate is closed (use nothing then).
    @inline(__always)
    func enter() -> Bool {
        var current = state.load(ordering: .relaxed)
        while current & 1 == 0 {
            let (exchanged, original) = state.compareExchange(
                expected: current, desired: current + 2, ordering: .acquiring)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Stops using the descriptors; true when the caller was the last user of a closed gate
    /// and must release them now.
    @inline(__always)
    func leave() -> Bool {
        state.wrappingSubtract(2, ordering: .acquiringAndReleasing).newValue == 1
    }

    /// Closes the gate (no new user can enter) from inside it: the caller is a user, and its
    /// `leave()` releases if it is the last one out. Returns how many other users are in.
    func closeFromInside() -> Int {
        let (old, _) = state.bitwiseOr(1, ordering: .acquiringAndReleasing)
        return old / 2 - 1
    }
}
