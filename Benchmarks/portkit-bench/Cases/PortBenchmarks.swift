import CPortKitSystem
import Dispatch
import Glibc
import PortMessaging
import Synchronization

/// Ports against their baselines: request/reply and one-way streams between two threads of
/// this process, and with a child process over a Unix socket (and Foundation's SocketPort
/// over TCP where it works).
enum PortBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        [
            inProcessRoundTrip(
                "port.inprocess.roundtrip", count: scale.count(2000, quick: 100), pacing: .idle, placement: .together),
            inProcessRoundTrip(
                "port.inprocess.roundtrip-b2b", count: scale.count(2000, quick: 100), pacing: .backToBack, placement: .together),
            inProcessRoundTrip(
                "port.inprocess.roundtrip-apart", count: scale.count(2000, quick: 100), pacing: .idle, placement: .apart),
            inProcessThroughput(count: scale.count(200_000, quick: 2000)),
            processRoundTrip(count: scale.count(2000, quick: 100)),
            processOneWay(count: scale.count(100_000, quick: 1000)),
        ] + bulkSizes.map { processBulk($0, scale: scale) }
    }


    /// The bytes of every message of `size` the benchmarks send.
    static func payload(_ size: Int) -> [UInt8] { (0..<size).map { UInt8(truncatingIfNeeded: $0) } }

    /// What a handler does with a request: answers with the same id and components.
    @Sendable static func echo(_ message: Message) -> Message? {
        Message(id: message.id, components: message.components)
    }

    // MARK: port.inprocess.throughput

    /// `port.inprocess.throughput`: one-way messages (8 bytes) from this thread to a port
    /// served on another thread, per second, until the last one is handled.
    static func inProcessThroughput(count: Int) -> BenchmarkCase {
        let bytes = payload(8)
        return BenchmarkCase(name: "port.inprocess.throughput", unit: "msgs/s", impls: [
            BenchmarkImpl("portkit") {
                let tally = Tally()
                let served = try ServedPort(name: "bench-port-tp") { _ in
                    tally.arrived()
                    return nil
                }
                let port = served.port.makeSendPort()
                return .init(
                    measure: {
                        try tally.rate(count) {
                            for number in 0..<count { try port.send(Message(id: UInt32(truncatingIfNeeded: number), bytes: bytes)) }
                        }
                    },
                    stop: served.stop)
            },
            BenchmarkImpl("dispatch") {
                let queue = DispatchQueue(label: "bench-port-tp-dispatch")
                let tally = Tally()
                return .init(measure: {
                    tally.rate(count) {
                        for number in 0..<count {
                            let message = Message(id: UInt32(truncatingIfNeeded: number), bytes: bytes)
                            queue.async {
                                withExtendedLifetime(message) { tally.arrived() }
                            }
                        }
                    }
                })
            },
        ])
    }

    // MARK: port.process.*

    /// `port.process.roundtrip`: the median time of a 64-byte request and its 64-byte reply
    /// to a child process.
    static func processRoundTrip(count: Int) -> BenchmarkCase {
        let size = 64
        let request = Message(id: BenchChildren.Op.echo, bytes: payload(size))
        return BenchmarkCase(name: "port.process.roundtrip", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let child = try PortKitChild()
                return .init(
                    measure: {
                        try medianMicroseconds(count) {
                            let reply = try child.worker.blockingRequest(request)
                            guard reply.bytes.count == size else { throw BenchmarkError.timedOut("a wrong reply") }
                        }
                    },
                    stop: child.stop)
            },
            rawRoundTrip("raw", count: count, size: size),
            rawRoundTrip("raw-creds", count: count, size: size, passCredentials: true),
            BenchmarkImpl("foundation") {
                let driver = try SocketPortDriver(mode: .roundtrip, probe: (count: 20, size: size))
                return .init(
                    measure: { try driver.run(count: count, size: size) * 1e6 },
                    stop: driver.stop)
            },
        ])
    }

    /// The raw side of `port.process.roundtrip`: `size` bytes written to the `raw-echo` child
    /// and read back, over a socket pair that passes credentials when `passCredentials`.
    static func rawRoundTrip(_ name: String, count: Int, size: Int, passCredentials: Bool = false) -> BenchmarkImpl {
        BenchmarkImpl(name) {
            let child = try RawChild(["raw-echo"], passCredentials: passCredentials)
            var buffer = payload(size)
            return .init(
                measure: {
                    try medianMicroseconds(count) {
                        try buffer.withUnsafeMutableBytes { bytes in
                            try child.write(UnsafeRawBufferPointer(bytes))
                            try child.read(into: bytes)
                        }
                    }
                },
                stop: child.stop)
        }
    }

    /// `port.process.oneway`: 64-byte one-way messages to a child process, per second,
    /// until the child has counted them all and said so.
    static func processOneWay(count: Int) -> BenchmarkCase {
        let rate = { (seconds: Double) in Double(count) / seconds }
        return stream(
            "port.process.oneway", unit: "msgs/s", count: count, size: 64, probeCount: 1000,
            baselines: [rawStream("raw-creds", child: ["raw-sink"], count: count, size: 64, passCredentials: true, rate: rate)], rate: rate)
    }

    /// A one-way stream case: `count` messages of `size` bytes, then the child's count of
    /// what arrived; `rate` turns the seconds that took into the case's unit. SocketPort is
    /// first tried with `probeCount` messages.
    static func stream(
        _ name: String, unit: String, count: Int, size: Int, probeCount: Int, withFoundation: Bool = true,
        baselines: [BenchmarkImpl] = [], rate: @escaping (Double) -> Double
    ) -> BenchmarkCase {
        let foundation = BenchmarkImpl("foundation") {
            let driver = try SocketPortDriver(mode: .oneway, probe: (count: probeCount, size: size))
            return .init(
                measure: { rate(try driver.run(count: count, size: size)) },
                stop: driver.stop)
        }
        return BenchmarkCase(name: name, unit: unit, impls: [
            BenchmarkImpl("portkit") {
                // Made when the case runs, not when it is listed (a bulk payload is 64 MiB).
                let message = Message(id: BenchChildren.Op.count, bytes: payload(size))
                let child = try PortKitChild()
                return .init(
                    measure: {
                        // One message sent `count` times, as the raw side writes one record
                        // `count` times (a Message is a value; sending it copies nothing).
                        let start = ContinuousClock.now
                        for _ in 0..<count { try child.worker.send(message) }
                        let report = try child.worker.blockingRequest(Message(id: BenchChildren.Op.report), receiveTimeout: .seconds(120))
                        let seconds = start.duration(to: .now).seconds
                        let counts = report.bytes.withUnsafeBytes { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
                        guard counts == (UInt64(count), UInt64(count * size)) else {
                            throw BenchmarkError.timedOut("the child counted \(counts), not \(count) messages")
                        }
                        return rate(seconds)
                    },
                    stop: child.stop)
            },
            rawStream("raw", child: ["raw-sink"], count: count, size: size, rate: rate),
        ] + baselines + (withFoundation ? [foundation] : []))
    }

    /// The raw side of a stream case: one 8-byte count of the bytes that follow, `count`
    /// writes of the record, and the child's acknowledgement, to the child `child` names.
    static func rawStream(
        _ name: String, child arguments: [String], count: Int, size: Int, passCredentials: Bool = false,
        rate: @escaping (Double) -> Double
    ) -> BenchmarkImpl {
        BenchmarkImpl(name) {
            let bytes = payload(size)
            let child = try RawChild(arguments, passCredentials: passCredentials)
            return .init(
                measure: {
                    // The 8-byte header says how many bytes follow; one write per record.
                    var total = UInt64(count * size)
                    let start = ContinuousClock.now
                    try withUnsafeBytes(of: &total) { try child.write($0) }
                    try bytes.withUnsafeBytes { record in
                        for _ in 0..<count { try child.write(record) }
                    }
                    var acknowledged: UInt64 = 0
                    try withUnsafeMutableBytes(of: &acknowledged) { try child.read(into: $0) }
                    let seconds = start.duration(to: .now).seconds
                    guard acknowledged == total else { throw BenchmarkError.timedOut("the child counted \(acknowledged) bytes, not \(total)") }
                    return rate(seconds)
                },
                stop: child.stop)
        }
    }

    // MARK: Measuring

    /// Runs `body` `count` times; the median and the p99 of its times in µs.
    static func medianMicroseconds(_ count: Int, _ body: () throws -> Void) throws -> RunSample {
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for _ in 0..<count {
            let start = ContinuousClock.now
            try body()
            samples.append(start.duration(to: .now).microseconds)
        }
        return RunSample(latencies: samples)
    }

    /// The median and p99 time, in µs, of `count` requests of `request` to `port`, each
    /// reply checked to hold `size` bytes.
    static func medianRequestMicroseconds(_ count: Int, _ request: Message, to port: SendPort, size: Int) throws -> RunSample {
        try medianMicroseconds(count) {
            guard try port.blockingRequest(request).bytes.count == size else { throw BenchmarkError.timedOut("a wrong reply") }
        }
    }
}

// MARK: - The parties

/// A receive port served on a loop thread of its own (`PortKitLoopThread`).
final class ServedPort: Sendable {
    let port = ReceivePort()
    private let thread: PortKitLoopThread

    /// Starts the thread and schedules the port on its loop with `handler`.
    init(name: String, handler: @escaping @Sendable (Message) -> Message?) throws {
        thread = try PortKitLoopThread(name: name)
        do {
            try port.schedule(on: thread.loop, handler: handler)
        } catch {
            thread.shutDown()
            throw error
        }
    }

    /// Invalidates the port and joins the thread.
    func stop() {
        port.invalidate()
        thread.shutDown()
    }
}

/// Counts messages handled on another thread and tells the measuring thread when a run's
/// last one is in.
final class Tally: Sendable {
    private let handled = Atomic<Int>(0)
    private let expected = Atomic<Int>(.max)
    private let done = DispatchSemaphore(value: 0)

    /// Called by the receiving side for each message.
    func arrived() {
        if handled.add(1, ordering: .relaxed).newValue == expected.load(ordering: .relaxed) { done.signal() }
    }

    /// Expects `count` messages, runs `send` (which sends them), waits until all are
    /// handled, and returns the messages per second.
    func rate(_ count: Int, _ send: () throws -> Void) rethrows -> Double {
        handled.store(0, ordering: .relaxed)
        expected.store(count, ordering: .relaxed)
        let start = ContinuousClock.now
        try send()
        done.wait()
        return Double(count) / start.duration(to: .now).seconds
    }
}

/// The harness's side of a SocketPort driver child (`SocketPortChildren`): starts it,
/// checks with a small probe run that SocketPort works for this kind of exchange, and asks
/// it for runs.
final class SocketPortDriver: Sendable {
    private let child: LineChild

    /// Starts the driver in `mode` and makes the probe run.
    /// - Throws: `BenchmarkError.notMeasurable` when the probe fails (with why).
    init(mode: SocketPortChildren.Mode, probe: (count: Int, size: Int)) throws {
        child = try LineChild(
            BenchProcess.executable, ["--child", "socketport-driver", mode.rawValue], discardingErrors: false)
        do {
            let ready = try readLine(timeout: .seconds(30))
            guard ready == "ready" else { throw BenchmarkError.notMeasurable(Self.failure(ready)) }
            _ = try run(count: probe.count, size: probe.size)
        } catch BenchmarkError.timedOut(let what) {
            stop()
            throw BenchmarkError.notMeasurable(what)
        } catch {
            stop()
            throw error
        }
    }

    /// One run: `count` messages of `size` bytes; the driver's seconds.
    /// - Throws: `BenchmarkError.notMeasurable` with the driver's reason when it failed.
    func run(count: Int, size: Int) throws -> Double {
        do {
            try child.send("run \(count) \(size)")
        } catch {
            throw BenchmarkError.notMeasurable("the SocketPort driver is gone")
        }
        let line = try readLine(timeout: .seconds(120))
        guard line.hasPrefix("ok "), let seconds = Double(line.dropFirst(3)) else {
            throw BenchmarkError.notMeasurable(Self.failure(line))
        }
        return seconds
    }

    private static func failure(_ line: String) -> String {
        line.hasPrefix("fail ") ? String(line.dropFirst(5)) : "the SocketPort driver said '\(line)'"
    }

    /// Ends the driver (end of its input) and waits for it.
    func stop() {
        child.stop()
    }

    /// The driver's next line; a `fail` line with its wait status when it ended.
    private func readLine(timeout: Duration) throws -> String {
        let line: String?
        do {
            line = try child.readLine(timeout: timeout)
        } catch .timedOut {
            throw BenchmarkError.timedOut("no answer from the SocketPort driver in \(timeout)")
        }
        guard let line else {
            return "fail the SocketPort driver process ended (\(describeStatus(child.wait())))"
        }
        return line
    }
}

/// A wait status in words.
func describeStatus(_ status: CInt) -> String {
    let signal = status & 0x7f
    if signal == 0 { return "exit status \((status >> 8) & 0xff)" }
    return "killed by signal \(signal), \(String(cString: strsignal(signal)))"
}

extension Duration {
    /// The duration in seconds.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
