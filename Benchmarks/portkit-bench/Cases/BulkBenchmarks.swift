/// `port.process.bulk…`: large one-way messages to a child process, one case per size.
extension PortBenchmarks {
    /// One size of `port.process.bulk`: the case's name, the message size, and how many
    /// messages a run sends (about 64 MB a run; at least three messages).
    struct BulkSize {
        let name: String
        let size: Int
        let count: Int
    }

    /// The sizes `port.process.bulk` is measured at, one case each, against raw writes of
    /// the same records in the same invocation. The child's port takes messages of up to
    /// `BenchChildren.maxMessageBytes`.
    static let bulkSizes = [
        BulkSize(name: "port.process.bulk", size: 64 << 10, count: 1000),
        BulkSize(name: "port.process.bulk-1m", size: 1 << 20, count: 64),
        BulkSize(name: "port.process.bulk-16m", size: 16 << 20, count: 4),
        BulkSize(name: "port.process.bulk-64m", size: 64 << 20, count: 3),
    ]

    /// One of `bulkSizes`, in MB (10⁶ bytes) per second, until the child has counted them
    /// all and said so. Beside `raw` (the child reads the bytes into one buffer it reuses),
    /// `raw-owned`: the child reads each record into memory of its own, allocated for it and
    /// freed after, as a message that is handed over must be (the floor for a receiver that
    /// keeps what it receives: at the larger sizes the allocator maps fresh pages for each,
    /// and the kernel zeroes them as they are first written). Foundation's `SocketPort` is
    /// tried at the smallest size only.
    static func processBulk(_ row: BulkSize, scale: BenchmarkScale) -> BenchmarkCase {
        let count = max(3, scale.count(row.count, quick: max(3, row.count / 50)))
        let rate: (Double) -> Double = { seconds in Double(count * row.size) / 1e6 / seconds }
        let owned = rawStream("raw-owned", child: ["raw-sink", String(row.size)], count: count, size: row.size, rate: rate)
        return stream(
            row.name, unit: "MB/s", count: count, size: row.size, probeCount: 1, withFoundation: row.size <= 64 << 10,
            baselines: [owned], rate: rate)
    }
}
