import Synchronization

/// The signal back of the wake benchmark, the same for every impl: the loop stores the
/// number of the round trip (an atomic store) and the caller spins on it without sleeping,
/// so no futex or scheduler wake-up of the caller adds to the measured time.
final class SpinReply: Sendable {
    private let latest = Atomic<Int>(0)

    /// Says that round trip `number` reached the loop.
    func send(_ number: Int) {
        latest.store(number, ordering: .releasing)
    }

    /// Spins until round trip `number` is back.
    /// - Throws: `BenchmarkError.timedOut` after `timeout` (a dead loop).
    func spin(until number: Int, timeout: Duration = .seconds(5)) throws(BenchmarkError) {
        var spins = 0
        var deadline: ContinuousClock.Instant?
        while latest.load(ordering: .acquiring) != number {
            spins &+= 1
            // Look at the clock rarely, so that it does not slow down the spin.
            guard spins & 0xFFFF == 0 else { continue }
            let now = ContinuousClock.now
            if deadline == nil { deadline = now + timeout }
            if let deadline, now > deadline { throw .timedOut("the loop never ran round trip \(number)") }
        }
    }
}
