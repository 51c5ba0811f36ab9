/// The summary of one impl of one case.
struct BenchmarkResult {
    let bench: String
    let impl: String
    let unit: String
    /// The impl's size in a scale case, else `nil`.
    var size: Int? = nil
    let summary: Summary
    /// The median over the runs of each run's 99th percentile, for a case whose runs are
    /// made of timed exchanges; else `nil`.
    var p99: Double? = nil

    /// The series a scale case's row belongs to: its impl's name without the size
    /// (`ports-10` → `ports`, `dbus-broker-1000` → `dbus-broker`). A case may measure several
    /// things at the same sizes; each row is compared with the smallest size of its own.
    var series: String {
        guard let size, impl.hasSuffix("-\(size)") else { return impl }
        return String(impl.dropLast("-\(size)".count))
    }
}

/// Runs a case's impls alternately in this process: after warm-up, impl A run 1,
/// impl B run 1, A run 2, B run 2, ... so that every impl sees the same machine
/// conditions (load from other processes, frequency, cache state) run by run.
struct BenchmarkRunner {
    /// Measured runs per impl.
    let runs: Int
    /// Unrecorded runs per impl before the measured ones (first-touch costs, thread start).
    let warmUpRuns: Int

    /// Starts every impl, runs them alternately, stops them, and summarizes each.
    /// - Throws: the first error of an impl's `start` or `measure`; impls already started
    ///   are stopped first. An impl whose `start` throws `BenchmarkError.notMeasurable` is
    ///   left out with a note on the standard error instead.
    func run(_ benchCase: BenchmarkCase) throws -> [BenchmarkResult] {
        precondition(runs > 0, "at least one run")
        var instances: [BenchmarkImpl.Instance] = []
        var impls: [BenchmarkImpl] = []
        defer { for instance in instances.reversed() { instance.stop() } }
        for impl in benchCase.impls {
            do {
                instances.append(try impl.start())
                impls.append(impl)
            } catch BenchmarkError.notMeasurable(let why) {
                printError("portkit-bench: \(benchCase.name)/\(impl.name): not measurable: \(why)")
            }
        }

        for _ in 0..<warmUpRuns {
            for instance in instances { _ = try instance.measure() }
        }
        var samples = [[RunSample]](repeating: [], count: instances.count)
        for _ in 0..<runs {
            for (index, instance) in instances.enumerated() {
                let sample = try instance.measure()
                for value in [sample.value] + (sample.p99.map { [$0] } ?? []) where !value.isFinite {
                    throw BenchmarkError.badSample(benchCase.name, impls[index].name, value)
                }
                samples[index].append(sample)
            }
        }
        return zip(impls, samples).map { impl, samples in
            let tails = samples.compactMap(\.p99)
            return BenchmarkResult(
                bench: benchCase.name, impl: impl.name, unit: benchCase.unit, size: impl.size,
                summary: Summary(samples.map(\.value)), p99: tails.count == samples.count ? Summary.median(tails) : nil)
        }
    }
}
