import Dispatch
import Glibc
import Synchronization
import Testing
import PortKitTestSupport
@testable import PermanentThread
import PortKitSystem
import PortKitLocks

@Suite("ThreadLoop: blocks, descriptors, resources")
struct ThreadLoopSourceTests {
    @Test func performBlocksFromFourThreadsRunOnceInProducerOrder() throws {
        let producers = 4, perProducer = 25_000
        let seen = Locked([[Int]](repeating: [], count: producers))
        let total = Atomic<Int>(0)
        let worker = LoopThread.runningDefaultMode()
        let loop = worker.loop
        DispatchQueue.concurrentPerform(iterations: producers) { producer in
            for i in 0..<perProducer {
                try! loop.perform {
                    seen.withLock { $0[producer].append(i) }
                    if total.add(1, ordering: .relaxed).newValue == producers * perProducer { loop.stop() }
                }
            }
        }
        #expect(worker.join(timeout: .seconds(120)))
        #expect(total.load(ordering: .relaxed) == producers * perProducer)
        for list in seen.withLock({ $0 }) { #expect(list == Array(0..<perProducer)) }
    }

    @Test func wakesAreCoalesced() throws {
        let sleeps = Atomic<Int>(0)
        let ran = Atomic<Int>(0)
        let gate = DispatchSemaphore(value: 0)
        let worker = LoopThread { loop in
            let keep = keepAlive()
            try! loop.add(keep, forMode: .default)
            let observer = LoopObserver(activities: .beforeWaiting) { _, _ in sleeps.add(1, ordering: .relaxed) }
            try! loop.add(observer, forMode: .default)
            _ = try! loop.run(mode: .default, until: .now + .seconds(120))
            keep.invalidate()
        }
        let loop = worker.loop
        // While a block holds the loop awake, 1,000 posts cost no wake-up at all.
        try loop.perform { gate.wait() }
        #expect(eventually { loop.inboxIsEmpty })
        let writesBefore = loop.wakeDeliveries
        for _ in 0..<1000 { try loop.perform { ran.add(1, ordering: .relaxed) } }
        #expect(loop.wakeDeliveries == writesBefore)
        gate.signal()
        #expect(eventually { ran.load(ordering: .relaxed) == 1000 })
        // A sleeping loop gets at most one write per sleep.
        for _ in 0..<10_000 { try loop.perform { ran.add(1, ordering: .relaxed) } }
        #expect(eventually { ran.load(ordering: .relaxed) == 11_000 })
        #expect(loop.wakeDeliveries <= sleeps.load(ordering: .relaxed))
        loop.stop()
        #expect(worker.join())
    }

    @Test func descriptorSourceFiresOnWriteAndStopsAfterRemoval() throws {
        try withOwnLoop { loop in
            let pipe = try FileDescriptor.pipe(nonBlocking: true)
            defer { try? pipe.read.close(); try? pipe.write.close() }
            let reads = Recorder<[UInt8]>()
            let source = DescriptorSource(descriptor: pipe.read.rawValue, events: .readable) { _, events in
                #expect(events.contains(.readable))
                var buffer = [UInt8](repeating: 0, count: 64)
                let n = buffer.withUnsafeMutableBytes { (try? pipe.read.read(into: $0)) ?? 0 }
                reads.append(Array(buffer.prefix(n)))
            }
            try loop.add(source, forMode: .default)
            let writer = LoopThread { _ in
                _ = [UInt8]([1, 2, 3]).withUnsafeBytes { try! pipe.write.write($0) }
            }
            #expect(writer.join())
            #expect(try loop.run(mode: .default, until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(reads.all == [[1, 2, 3]])

            loop.remove(source, forMode: .default)
            _ = [UInt8]([4]).withUnsafeBytes { try! pipe.write.write($0) }
            #expect(try loop.run(mode: .default, for: .milliseconds(50)) == .finished)
            #expect(reads.all == [[1, 2, 3]])
            // Re-adding is allowed; the pending byte is then delivered.
            try loop.add(source, forMode: .default)
            #expect(try loop.run(mode: .default, until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(reads.all == [[1, 2, 3], [4]])
            source.invalidate()
        }
    }

    @Test func descriptorSourceIsParkedOutsideItsMode() throws {
        try withOwnLoop { loop in
            let pipe = try FileDescriptor.pipe(nonBlocking: true)
            defer { try? pipe.read.close(); try? pipe.write.close() }
            let calls = Atomic<Int>(0)
            let source = DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in
                calls.add(1, ordering: .relaxed)
                var byte: UInt8 = 0
                _ = withUnsafeMutableBytes(of: &byte) { try? pipe.read.read(into: $0) }
            }
            try loop.add(source, forMode: .default)
            defer { source.invalidate() }
            let sleeps = Atomic<Int>(0)
            let observer = LoopObserver(activities: .afterWaiting) { _, _ in sleeps.add(1, ordering: .relaxed) }
            try loop.add(observer, forMode: "other")
            defer { observer.invalidate() }
            let keep = keepAlive()
            try loop.add(keep, forMode: "other")
            defer { keep.invalidate() }
            _ = [UInt8]([7]).withUnsafeBytes { try! pipe.write.write($0) }
            // Running another mode: no callback, and the ready pipe does not keep waking the loop.
            #expect(try loop.run(mode: "other", for: .milliseconds(100)) == .timedOut)
            #expect(calls.load(ordering: .relaxed) == 0)
            #expect(sleeps.load(ordering: .relaxed) <= 3)
            #expect(try loop.run(mode: .default, until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(calls.load(ordering: .relaxed) == 1)
        }
    }

    /// Added on the loop's thread while it runs a mode (from a block it performs): a source
    /// of that mode, or of the common modes, fires in the same run; one of another mode
    /// stays parked, firing only once that mode runs.
    @Test func descriptorSourcesAddedWhileTheLoopRunsFireOnlyInTheirModes() throws {
        try withOwnLoop { loop in
            let pipes = try (0..<3).map { _ in try FileDescriptor.pipe(nonBlocking: true) }
            defer { for pipe in pipes { try? pipe.read.close(); try? pipe.write.close() } }
            // Every pipe is readable before its source is added.
            for pipe in pipes { _ = [UInt8]([1]).withUnsafeBytes { try! pipe.write.write($0) } }
            let fired = Recorder<String>()
            let sources = zip(["default", "common", "other"], pipes).map { name, pipe in
                DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in
                    var byte: UInt8 = 0
                    _ = withUnsafeMutableBytes(of: &byte) { try? pipe.read.read(into: $0) }
                    fired.append("\(name) in \(ThreadLoop.current.currentMode?.rawValue ?? "none")")  // owned thread
                }
            }
            defer { for source in sources { source.invalidate() } }
            let keep = keepAlive()
            try loop.add(keep, forMode: "other")
            defer { keep.invalidate() }
            let modes: [LoopMode] = [.default, .common, "other"]
            try loop.perform {
                for (source, mode) in zip(sources, modes) { try! ThreadLoop.current.add(source, forMode: mode) }  // owned thread
            }
            #expect(eventually { _ = try? loop.run(mode: .default, for: .milliseconds(20)); return fired.count >= 2 })
            #expect(Set(fired.all) == ["default in default", "common in default"])
            #expect(try loop.run(mode: "other", until: .now + .seconds(60), returnAfterSourceHandled: true) == .handledSource)
            #expect(fired.all.last == "other in other")
            #expect(fired.count == 3)
        }
    }

    @Test func descriptorSourceAddedToTwoModesFromAnotherThread() throws {
        let pipe = try FileDescriptor.pipe(nonBlocking: true)
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let calls = Recorder<LoopMode?>()
        let added = DispatchSemaphore(value: 0)
        let results = Recorder<LoopRunResult>()
        let worker = LoopThread { loop in
            added.wait()
            for mode: LoopMode in ["first", "second"] {
                results.append(try! loop.run(mode: mode, until: .now + .seconds(60), returnAfterSourceHandled: true))
            }
        }
        let source = DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in
            var byte: UInt8 = 0
            _ = withUnsafeMutableBytes(of: &byte) { try? pipe.read.read(into: $0) }
            calls.append(ThreadLoop.current.currentMode)  // owned thread
        }
        try worker.loop.add(source, forMode: "first")
        try worker.loop.add(source, forMode: "second")
        _ = [UInt8]([1, 2]).withUnsafeBytes { try! pipe.write.write($0) }
        added.signal()
        #expect(worker.join())
        #expect(results.all == [.handledSource, .handledSource])
        #expect(calls.all == ["first", "second"])
        source.invalidate()
    }

    /// A loop that watches no descriptor sleeps on its futex, one that does in epoll: a
    /// descriptor source added from another thread while the loop sleeps on the futex must
    /// move the next sleep to epoll (or its readiness would never wake the loop), and
    /// removing it must move the loop back without losing a wake-up.
    @Test func aSleepingLoopMovesBetweenFutexAndEpollAsDescriptorsComeAndGo() throws {
        let pipe = try FileDescriptor.pipe(nonBlocking: true)
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let events = Recorder<String>()
        let worker = LoopThread.runningDefaultMode()
        let loop = worker.loop
        // Asleep on the futex (no descriptor): a block wakes it.
        try loop.perform { events.append("block 1") }
        #expect(eventually { events.all == ["block 1"] })
        let source = DescriptorSource(descriptor: pipe.read.rawValue, events: .readable) { _, _ in
            var byte: UInt8 = 0
            _ = withUnsafeMutableBytes(of: &byte) { try? pipe.read.read(into: $0) }
            events.append("byte \(byte)")
        }
        try loop.add(source, forMode: .default)
        // The add is carried out on the loop's thread; wait until it is, then let the loop
        // fall asleep (now in epoll) before the byte is written.
        let added = Atomic<Bool>(false)
        try loop.perform { added.store(true, ordering: .releasing) }
        #expect(eventually { added.load(ordering: .acquiring) })
        for round in 1...3 {
            _ = [UInt8]([UInt8(round)]).withUnsafeBytes { try! pipe.write.write($0) }
            #expect(eventually { events.all.last == "byte \(round)" })
        }
        loop.remove(source, forMode: .default)
        // Back on the futex: blocks still wake it, the descriptor no longer does.
        try loop.perform { events.append("block 2") }
        #expect(eventually { events.all.last == "block 2" })
        _ = [UInt8]([9]).withUnsafeBytes { try! pipe.write.write($0) }
        try loop.perform { events.append("block 3") }
        #expect(eventually { events.all.last == "block 3" })
        #expect(events.all == ["block 1", "byte 1", "byte 2", "byte 3", "block 2", "block 3"])
        loop.stop()
        #expect(worker.join())
        source.invalidate()
    }

    @Test func descriptorErrorsReachTheCaller() throws {
        try withOwnLoop { loop in
            let bad = DescriptorSource(descriptor: 99_999) { _, _ in }
            #expect(throws: ThreadLoopError.self) { try loop.add(bad) }
            let pipe = try FileDescriptor.pipe()
            defer { try? pipe.read.close(); try? pipe.write.close() }
            let first = DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in }
            let second = DescriptorSource(descriptor: pipe.read.rawValue) { _, _ in }
            try loop.add(first)
            defer { first.invalidate() }
            #expect(throws: ThreadLoopError.descriptorAlreadyWatched(pipe.read.rawValue)) { try loop.add(second) }
        }
    }

    @Test func idleLoopUsesNoCPU() throws {
        let cpu = Locked<Duration?>(nil)
        let worker = LoopThread { loop in
            let keep = keepAlive()
            try! loop.add(keep, forMode: .default)
            let before = threadCPUTime()
            _ = try! loop.run(mode: .default, for: .seconds(1))
            cpu.withLock { $0 = threadCPUTime() - before }
            keep.invalidate()
        }
        #expect(worker.join())
        let used = try #require(cpu.withLock { $0 })
        #expect(used < .milliseconds(20), "an idle loop used \(used) of CPU in a second")
    }

    @Test func loopsOfEndedThreadsCloseTheirDescriptors() throws {
        // Counted in a child process, where no other test opens descriptors meanwhile.
        let (status, output) = try ChildProcess.run("loop-descriptor-cycle")
        #expect(status == 0)
        let counts = output.split(separator: " ").compactMap { $0.split(separator: "=").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } }
        try #require(counts.count == 2, "helper said: \(output)")
        #expect(counts[0] == counts[1], "100 loop threads came and went: \(output)")
    }

    @Test func aLoopWhoseThreadEndedRefusesWork() throws {
        let worker = LoopThread { loop in _ = try? loop.run(mode: .default, for: .milliseconds(1)) }
        #expect(worker.join())
        #expect(eventually { worker.loop.isClosed })
        #expect(throws: ThreadLoopError.loopEnded) { try worker.loop.perform {} }
        #expect(throws: ThreadLoopError.loopEnded) { try worker.loop.add(LoopTimer(after: .seconds(1)) { _ in }) }
    }
}

/// CPU time used by the calling thread (user and system).
private func threadCPUTime() -> Duration {
    var spec = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
    return .seconds(spec.tv_sec) + .nanoseconds(spec.tv_nsec)
}
