/// The median, minimum and maximum of a set of samples.
struct Summary: Equatable {
    let median: Double
    let min: Double
    let max: Double
    let count: Int

    /// Summarizes `samples`, which must not be empty.
    init(_ samples: [Double]) {
        precondition(!samples.isEmpty, "no samples to summarize")
        let sorted = samples.sorted()
        median = Self.median(ofSorted: sorted)
        min = sorted[0]
        max = sorted[sorted.count - 1]
        count = sorted.count
    }

    /// The median of `samples` (the mean of the two middle ones for an even count).
    static func median(_ samples: [Double]) -> Double {
        precondition(!samples.isEmpty, "no samples for a median")
        return median(ofSorted: samples.sorted())
    }

    /// The median of `sorted`, which must be sorted and not empty.
    static func median(ofSorted sorted: [Double]) -> Double {
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    /// The `percent`th percentile of `sorted` by nearest rank: the smallest sample that at
    /// least `percent` % of the samples do not exceed. `sorted` must be sorted and not empty.
    static func percentile(_ percent: Int, ofSorted sorted: [Double]) -> Double {
        let rank = (sorted.count * percent + 99) / 100
        return sorted[Swift.max(rank, 1) - 1]
    }
}

extension Duration {
    /// The duration in microseconds.
    var microseconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) * 1e6 + Double(attoseconds) / 1e12
    }
}
