import CPortKitSystem
import Glibc
import NamedPortServer
import PermanentThread
import Synchronization

/// Gives the memory of clients that have left back to the system.
///
/// What a connection held goes back to the allocator when it closes, but glibc's allocator
/// keeps freed memory in the middle of its heap for the next allocations: after a crowd of
/// clients came and went, the daemon would stay at its peak size. Once `threshold`
/// connections have closed, a one-shot timer on the daemon's main loop asks the allocator,
/// a second later (so a crowd leaving together is one call), to hand its free pages back
/// (`malloc_trim`). Closes are counted where the server reports them, with no hop to the
/// main loop until a trim is due; an idle daemon arms no timer.
final class MemoryTrim: Sendable {
    private let loop: ThreadLoop
    private let threshold: Int
    private let closed = Atomic<Int>(0)
    private let armed = Atomic<Bool>(false)

    init(on loop: ThreadLoop, threshold: Int = 64) {
        self.loop = loop
        self.threshold = threshold
    }

    /// Notes a server event (on the server's thread); a closed connection counts towards
    /// the next trim.
    func note(_ event: NameServerEvent) {
        guard case .connectionClosed = event, closed.add(1, ordering: .relaxed).newValue >= threshold,
              armed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
        else { return }
        try? loop.perform { [self] in
            let timer = LoopTimer(after: .seconds(1)) { [self] _ in
                closed.store(0, ordering: .relaxed)
                armed.store(false, ordering: .relaxed)
                malloc_trim(0)
            }
            try? loop.add(timer, forMode: .default)
        }
    }
}
