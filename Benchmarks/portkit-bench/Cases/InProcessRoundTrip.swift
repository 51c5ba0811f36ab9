import Dispatch
import PortMessaging
import PortKitLocks

extension PortBenchmarks {
    /// How the requests of an in-process round-trip case follow one another.
    enum Pacing {
        /// Each request goes to an idle receiver: the caller first sleeps `idleGap`, as
        /// `execute.roundtrip` does, so every request pays the receiver's wake-up.
        case idle
        /// Each request as soon as the last reply is in: whether the receiver is still awake
        /// then is a race with its return to sleep.
        case backToBack

        /// Every impl's receiving thread is back asleep within microseconds of replying.
        static let idleGap: Duration = .microseconds(200)
    }

    /// `port.inprocess.roundtrip` (idle) and `port.inprocess.roundtrip-b2b` (back to back):
    /// the median time of a request and its reply between this thread and a port served on
    /// another thread (8 bytes each way), against Dispatch's async on a serial queue and a
    /// semaphore.
    ///
    /// Left to the scheduler, the same impl measured 5 µs or 55 µs from one invocation to the
    /// next: two threads on one CPU hand over with a context switch, on two CPUs of this
    /// virtual machine each wake-up of a halted CPU costs tens of µs, and where the scheduler
    /// put them held for a whole invocation. So every thread of the process (Dispatch's
    /// workers too, which cannot be pinned one by one) runs on `placement`'s CPUs during a run.
    static func inProcessRoundTrip(_ name: String, count: Int, pacing: Pacing, placement: WakePlacement) -> BenchmarkCase {
        let request = Message(id: 1, bytes: payload(8))
        let run = { (roundTrip: () throws -> Void) throws -> RunSample in
            let pinning = try ProcessPinning.pin(placement)
            defer { pinning.restore() }
            var samples: [Double] = []
            samples.reserveCapacity(count)
            for _ in 0..<count {
                if case .idle = pacing { ExecuteBenchmarks.pause(Pacing.idleGap) }
                let start = ContinuousClock.now
                try roundTrip()
                samples.append(start.duration(to: .now).microseconds)
            }
            return RunSample(latencies: samples)
        }
        return BenchmarkCase(name: name, unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let served = try ServedPort(name: "bench-port-rt", handler: echo)
                let port = served.port.makeSendPort()
                return .init(
                    measure: {
                        try run {
                            guard try port.blockingRequest(request).id == request.id else { throw BenchmarkError.timedOut("a wrong reply") }
                        }
                    },
                    stop: served.stop)
            },
            BenchmarkImpl("dispatch") {
                // The same work the Dispatch way: the handler runs on a serial queue, the
                // caller waits on a semaphore for the reply it leaves in a box.
                let queue = DispatchQueue(label: "bench-port-rt-dispatch")
                let replied = DispatchSemaphore(value: 0)
                let box = Locked<Message?>(nil)
                return .init(measure: {
                    try run {
                        queue.async {
                            let reply = echo(request)
                            box.withLock { $0 = reply }
                            replied.signal()
                        }
                        replied.wait()
                        guard box.withLock({ $0.take() })?.id == request.id else { throw BenchmarkError.timedOut("a wrong reply") }
                    }
                })
            },
        ])
    }
}
