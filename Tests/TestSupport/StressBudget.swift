import Foundation

/// How long a stress test repeats its cycle: for a time, not a count, so that its pass
/// never depends on how fast the machine is. It runs cycles until `duration` has passed
/// and at least `minimumCycles` are done, and the test checks every cycle it managed.
///
/// `PORTKIT_STRESS_SECONDS` sets the time (default 20 seconds); a long soak sets more.
package struct StressBudget: Sendable, CustomStringConvertible {
    /// How long to keep starting cycles.
    package var duration: Duration
    /// Cycles run whatever the time: a very slow machine still runs this many.
    package var minimumCycles: Int

    /// The budget `PORTKIT_STRESS_SECONDS` sets (20 seconds without it), at least
    /// `minimumCycles` cycles.
    package static func fromEnvironment(minimumCycles: Int = 20) -> StressBudget {
        let seconds = ProcessInfo.processInfo.environment["PORTKIT_STRESS_SECONDS"].flatMap(Double.init) ?? 20
        return StressBudget(duration: .milliseconds(Int64(max(0, seconds) * 1000)), minimumCycles: minimumCycles)
    }

    /// A budget of `duration`, at least `minimumCycles` cycles.
    package init(duration: Duration, minimumCycles: Int) {
        self.duration = duration
        self.minimumCycles = minimumCycles
    }

    /// The budget a helper process was given as `--seconds S --minimum N` (as `arguments`
    /// renders it); `nil` if either is missing.
    package init?(arguments: [String]) {
        func value(_ option: String) -> String? {
            guard let index = arguments.firstIndex(of: option), index + 1 < arguments.count else { return nil }
            return arguments[index + 1]
        }
        guard let seconds = value("--seconds").flatMap(Double.init), let minimum = value("--minimum").flatMap(Int.init) else {
            return nil
        }
        self.init(duration: .milliseconds(Int64(seconds * 1000)), minimumCycles: minimum)
    }

    /// `--seconds S --minimum N`, for a helper process.
    package var arguments: [String] {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        return ["--seconds", "\(Double(milliseconds) / 1000)", "--minimum", "\(minimumCycles)"]
    }

    /// How long a test waits for a helper running this budget before calling it hung: the
    /// budget, the minimum's cycles at a very slow pace, and a margin. Only a hang reaches it.
    package var hangLimit: Duration { duration + .seconds(3 * minimumCycles) + .seconds(300) }

    /// Runs `cycle` (given its index, from 0) until the budget is spent and the minimum
    /// done; returns how many cycles ran. An error from a cycle ends the run.
    package func run(_ cycle: (Int) throws -> Void) rethrows -> Int {
        let end = ContinuousClock.now + duration
        var done = 0
        while done < minimumCycles || ContinuousClock.now < end {
            try cycle(done)
            done += 1
        }
        return done
    }

    package var description: String { "\(duration) and at least \(minimumCycles) cycles" }
}
