import Dispatch
import Synchronization

/// One run of the timer benchmark: the lateness of each timer of the chain, in µs, and a
/// way for the caller to wait for the chain's end.
final class TimerChain: Sendable {
    private struct State {
        var lateness: [Double] = []
        var failure: String?
    }

    /// How many timers fire in the run.
    let length: Int
    private let state = Mutex(State())
    private let ended = DispatchSemaphore(value: 0)

    init(length: Int) {
        self.length = length
    }

    /// Records one timer's lateness; returns whether the chain goes on (arm the next one).
    func record(lateness microseconds: Double) -> Bool {
        let done = state.withLock { state in
            state.lateness.append(microseconds)
            return state.lateness.count >= length
        }
        if done { ended.signal() }
        return !done
    }

    /// Ends the chain early with an error.
    func fail(_ error: any Error) {
        state.withLock { $0.failure = "\(error)" }
        ended.signal()
    }

    /// Waits for the chain's end and returns the median and p99 lateness in µs.
    /// - Throws: `BenchmarkError.timedOut` when the chain stalls.
    func medianLateness() throws(BenchmarkError) -> RunSample {
        // Each timer takes 1 ms; allow plenty for a loaded machine.
        let timeout = DispatchTime.now() + .seconds(10 + length / 100)
        guard ended.wait(timeout: timeout) == .success else {
            throw .timedOut("the timer chain stopped after \(state.withLock { $0.lateness.count }) of \(length) timers")
        }
        let (lateness, failure) = state.withLock { ($0.lateness, $0.failure) }
        if let failure { throw .timedOut("the timer chain failed: \(failure)") }
        return RunSample(latencies: lateness)
    }
}
