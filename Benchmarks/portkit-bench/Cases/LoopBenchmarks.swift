import Dispatch
import PermanentThread

/// The run loop against its baselines: how fast a sleeping loop wakes for a block, and
/// how punctual a short timer is.
enum LoopBenchmarks: BenchmarkFamily {
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        let roundTrips = scale.count(2000, quick: 100)
        return [
            wake("loop.wake", placement: .apart, roundTrips: roundTrips),
            wake("loop.wake-same-cpu", placement: .together, roundTrips: roundTrips),
            timer(chainLength: scale.count(200, quick: 20)),
        ]
    }

    // MARK: loop.wake

    /// `loop.wake`, `loop.wake-same-cpu`: the median round trip of a block posted to a
    /// sleeping loop that signals back. Every impl signals back the same way (`SpinReply`).
    ///
    /// The PortKit loop watches no descriptor, so it sleeps on its futex; `raw` is the least
    /// an epoll loop can do, `pthread` the least a futex sleeper can (a condition variable).
    static func wake(_ name: String, placement: WakePlacement, roundTrips: Int) -> BenchmarkCase {
        BenchmarkCase(name: name, unit: "µs", impls: [
            wakeImpl("portkit", placement, roundTrips) { try PortKitLoopThread(name: "bench-wake-pk") },
            wakeImpl("raw", placement, roundTrips) { try RawEpollLoop(name: "bench-wake-raw") },
            wakeImpl("pthread", placement, roundTrips) { try ConditionQueueThread(name: "bench-wake-pth") },
        ])
    }

    /// An impl of a wake case: `start` makes the loop, which is pinned as `placement` says.
    static func wakeImpl<Loop: SleepingLoop>(
        _ name: String, _ placement: WakePlacement, _ roundTrips: Int, size: Int? = nil,
        start: @escaping () throws -> Loop
    ) -> BenchmarkImpl {
        BenchmarkImpl(name, size: size) {
            let cpus = try placement.cpus()
            let loop = try start()
            do {
                try CPUAffinity.restrict(threadID: loop.threadID, to: cpus.loop)
            } catch {
                loop.shutDown()
                throw error
            }
            return .init(
                measure: { try medianRoundTrip(roundTrips, on: loop, callerCPUs: cpus.caller) },
                stop: loop.shutDown)
        }
    }

    /// One run of a wake case: `count` round trips, each posted once the loop's thread
    /// sleeps (in epoll or on a futex), with the caller on `callerCPUs`; returns the median
    /// and p99 in µs.
    static func medianRoundTrip(_ count: Int, on loop: some SleepingLoop, callerCPUs: CPUSet) throws -> RunSample {
        let probe = try ThreadSleepProbe(threadID: loop.threadID)
        defer { probe.close() }
        let callerWas = try CPUAffinity.allowed()
        try CPUAffinity.restrict(to: callerCPUs)
        defer { try? CPUAffinity.restrict(to: callerWas) }

        let reply = SpinReply()
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for number in 1...count {
            try probe.waitUntilAsleep()
            let start = ContinuousClock.now
            try loop.post { reply.send(number) }
            try reply.spin(until: number)
            samples.append(start.duration(to: .now).microseconds)
        }
        return RunSample(latencies: samples)
    }

    // MARK: loop.timer-1ms

    /// `loop.timer-1ms`: the median lateness of a chain of one-shot 1 ms timers, each armed
    /// by the previous one's handler. Lateness is when the handler runs minus the fire date
    /// the timer was given.
    static func timer(chainLength: Int) -> BenchmarkCase {
        BenchmarkCase(name: "loop.timer-1ms", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let thread = try PortKitLoopThread(name: "bench-timer-pk")
                return .init(
                    measure: {
                        let chain = TimerChain(length: chainLength)
                        let loop = thread.loop
                        try loop.perform { armPortKitTimer(chain, on: loop) }
                        return try chain.medianLateness()
                    },
                    stop: thread.shutDown)
            },
            BenchmarkImpl("dispatch") {
                let queue = DispatchQueue(label: "bench-timer-dispatch")
                return .init(measure: {
                    let chain = TimerChain(length: chainLength)
                    queue.async { armDispatchTimer(chain, on: queue) }
                    return try chain.medianLateness()
                })
            },
        ])
    }

    /// Arms the next PortKit timer of `chain`; called on the loop's thread.
    private static func armPortKitTimer(_ chain: TimerChain, on loop: ThreadLoop) {
        let timer = LoopTimer(after: .milliseconds(1)) { timer in
            let now = ContinuousClock.now
            if chain.record(lateness: (now - timer.fireDate).microseconds) { armPortKitTimer(chain, on: loop) }
        }
        do {
            try loop.add(timer, forMode: .default)
        } catch {
            chain.fail(error)
        }
    }

    /// Arms the next Dispatch timer of `chain`; called on `queue`.
    private static func armDispatchTimer(_ chain: TimerChain, on queue: DispatchQueue) {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let deadline = DispatchTime.now() + .milliseconds(1)
        timer.schedule(deadline: deadline, leeway: .nanoseconds(0))
        timer.setEventHandler {
            let now = DispatchTime.now()
            timer.cancel()
            let late = Int64(bitPattern: now.uptimeNanoseconds &- deadline.uptimeNanoseconds)
            if chain.record(lateness: Double(late) / 1000) { armDispatchTimer(chain, on: queue) }
        }
        timer.activate()
    }
}
