import PermanentThread
import Synchronization

/// How cost grows with the work a loop holds. Each case's impls are sizes of one thing (the
/// size is in the JSON row); the table compares each size with the smallest of the same run.
enum ScaleBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        let messages = scale.count(2000, quick: 100)
        return [
            ports(sizes: scale.isQuick ? [10, 1000] : [10, 100, 1000, 10_000], messages: messages),
        ]
    }

    // MARK: scale.ports

    /// `scale.ports`: the median time of a message to a random one of `size` custom sources
    /// scheduled on one sleeping loop (each `ReceivePort` has one), from signalling it to its
    /// perform's answer, as `loop.wake-same-cpu` measures a block: caller and loop on one
    /// CPU, each message sent once the loop sleeps. Flat is the goal: a pass should cost the
    /// sources that were signalled, not the sources the loop holds.
    static func ports(sizes: [Int], messages: Int) -> BenchmarkCase {
        BenchmarkCase(name: "scale.ports", unit: "µs", impls: sizes.map { size in
            BenchmarkImpl("ports-\(size)", size: size) {
                let cpus = try WakePlacement.together.cpus()
                let loop = try SourcesLoop(name: "bench-scale-ports", sources: size)
                do {
                    try CPUAffinity.restrict(threadID: loop.threadID, to: cpus.loop)
                } catch {
                    loop.shutDown()
                    throw error
                }
                return .init(
                    measure: { try LoopBenchmarks.medianRoundTrip(messages, on: loop, callerCPUs: cpus.caller) },
                    stop: loop.shutDown)
            }
        })
    }
}

/// A PortKit loop holding `count` custom sources in its default mode; a posted block reaches
/// it by signalling a random one of them, whose perform runs it.
final class SourcesLoop: SleepingLoop {
    /// The kernel id of the loop's thread.
    var threadID: CInt { thread.threadID }
    private let thread: PortKitLoopThread
    private let sources: [LoopSource]
    private let next = NextBlock()

    /// The block on its way and the state of the random choice of source.
    private final class NextBlock: Sendable {
        let state = Mutex<(block: (@Sendable () -> Void)?, seed: UInt64)>((nil, 0x9E37_79B9_7F4A_7C15))
    }

    /// Starts the loop's thread and schedules the sources; returns once the loop holds them all.
    /// - Throws: `BenchmarkError` when the thread cannot start or a source cannot be added.
    init(name: String, sources count: Int) throws {
        thread = try PortKitLoopThread(name: name)
        let next = self.next
        sources = (0..<count).map { _ in
            LoopSource(perform: { next.state.withLock { slot in defer { slot.block = nil }; return slot.block }?() })
        }
        do {
            for source in sources { try thread.loop.add(source, forMode: .default) }
            // Changes from another thread are carried out in order: once this block ran, all are in.
            let added = Handoff<Bool>()
            try thread.post { added.put(true) }
            _ = try added.take(within: .seconds(60), what: "\(name) to schedule \(count) sources")
        } catch {
            thread.shutDown()
            throw error
        }
    }

    /// Has the loop run `block` by signalling a random source.
    func post(_ block: @escaping @Sendable () -> Void) throws {
        let index = next.state.withLock { slot -> Int in
            slot.block = block
            // xorshift64: the same sequence of sources in every run and every build.
            slot.seed ^= slot.seed << 13
            slot.seed ^= slot.seed >> 7
            slot.seed ^= slot.seed << 17
            return Int(slot.seed % UInt64(sources.count))
        }
        sources[index].signal()
    }

    /// Stops the loop and joins its thread; the sources are cancelled as the thread ends.
    func shutDown() { thread.shutDown() }
}
