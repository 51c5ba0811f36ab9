/// A named measurement and the implementations compared on it.
///
/// Every impl measures the same thing and reports one sample per run, in `unit`. The
/// runner alternates the impls run by run, so each sees the same machine conditions.
struct BenchmarkCase {
    /// A dotted name, `family.what`; `--filter` matches a substring of it.
    let name: String
    /// The unit of every sample, for example "µs". Lower is better.
    let unit: String
    /// The implementations, the PortKit one (named `portkit`) first by convention.
    let impls: [BenchmarkImpl]

    /// The case with only the impls named in `names`.
    func keeping(_ names: [String]) -> BenchmarkCase {
        BenchmarkCase(name: name, unit: unit, impls: impls.filter { names.contains($0.name) })
    }
}

/// One implementation of a benchmark case.
///
/// `start` runs once, before the first run (start threads, open descriptors, here); it
/// returns the `Instance` whose `measure` is called once per run and whose `stop` is
/// called once after the last run.
struct BenchmarkImpl {
    /// An impl ready to measure: what one run does, and how to clean up.
    struct Instance {
        /// Performs one measured run and returns its sample.
        let measure: () throws -> RunSample
        /// Releases what `start` made (joins threads, closes descriptors).
        let stop: () -> Void

        /// `measure` returns a plain value (`Double`) or, for a run of timed exchanges, a
        /// `RunSample` with their tail.
        init<Value: RunSampleConvertible>(measure: @escaping () throws -> Value, stop: @escaping () -> Void = {}) {
            self.measure = { try measure().runSample }
            self.stop = stop
        }
    }

    /// The impl's name: `portkit`, or the baseline's (`raw`, `dispatch`, ...).
    let name: String
    /// The size a scale case measures this impl at (ports, timers, threads), or `nil`. The
    /// impls of a scale case are sizes of one thing; each is compared with the smallest.
    let size: Int?
    /// Prepares the impl; called once per case, before the first run.
    let start: () throws -> Instance

    /// An impl that needs setting up: `start` returns what to measure and how to stop.
    init(_ name: String, size: Int? = nil, start: @escaping () throws -> Instance) {
        self.name = name
        self.size = size
        self.start = start
    }

    /// An impl with nothing to set up: `measure` performs one run.
    init<Value: RunSampleConvertible>(_ name: String, measure: @escaping () throws -> Value) {
        self.name = name
        self.size = nil
        self.start = { Instance(measure: measure) }
    }
}

/// One run's sample: its value in the case's unit and, for a run made of many timed
/// exchanges (a round trip's), the 99th percentile of their times.
struct RunSample {
    /// The run's value: for a run of timed exchanges, the median of their times.
    var value: Double
    /// The 99th percentile of the run's exchange times, or `nil` for a run that is one figure.
    var p99: Double? = nil

    /// The sample of a run of timed exchanges: their median, and their 99th percentile.
    init(latencies: [Double]) {
        precondition(!latencies.isEmpty, "no latencies in a run")
        let sorted = latencies.sorted()
        value = Summary.median(ofSorted: sorted)
        p99 = Summary.percentile(99, ofSorted: sorted)
    }

    init(value: Double, p99: Double? = nil) {
        self.value = value
        self.p99 = p99
    }
}

/// What a run's `measure` may return: a plain value, or a `RunSample`.
protocol RunSampleConvertible {
    /// The value as a run's sample.
    var runSample: RunSample { get }
}

extension Double: RunSampleConvertible {
    var runSample: RunSample { RunSample(value: self) }
}

extension RunSample: RunSampleConvertible {
    var runSample: RunSample { self }
}

/// How much work one run does: full for measurements, small for a smoke run (`--quick`).
struct BenchmarkScale: Sendable {
    /// Whether this is a smoke run.
    let isQuick: Bool

    /// `full` normally, `quick` in a smoke run.
    func count(_ full: Int, quick: Int) -> Int { isQuick ? quick : full }
}

/// A group of related cases, defined in one file (`LoopBenchmarks.swift`, ...).
protocol BenchmarkFamily {
    /// The family's cases, sized for `scale`. Making a case must be cheap: threads and
    /// descriptors belong in `BenchmarkImpl.start`, which runs only if the case is selected.
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase]
}
