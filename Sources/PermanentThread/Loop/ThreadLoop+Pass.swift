// The pass: what one run of the loop does, top to bottom in CoreFoundation's order (the
// order observers see), and the steps it calls: timers, ready descriptors, observers.
extension ThreadLoop {
    /// The passes of one run, in CoreFoundation's order; observers see exactly this.
    func runPasses(
        _ mode: LoopMode, _ items: ModeItems, deadline: ContinuousClock.Instant?, returnAfterSourceHandled: Bool
    ) throws(ThreadLoopError) -> LoopRunResult {
        if stopRequested.exchange(false, ordering: .acquiringAndReleasing) { return .stopped }
        let pollOnly = deadline.map { $0 <= .now } ?? false
        // Asked once: `ContinuousClock.Instant` is resilient, so every copy of an optional
        // one is a call through its value witnesses; a run without a deadline makes none.
        let hasDeadline = deadline != nil
        while true {
            notify(.beforeTimers, items)
            notify(.beforeSources, items)
            runBlocks(mode)
            var sourceHandled = performSignalledSources(items, stopAfterOne: returnAfterSourceHandled)
            if sourceHandled { runBlocks(mode) }

            let poll = sourceHandled || pollOnly
            if !poll { notify(.beforeWaiting, items) }
            let sleep: Duration?
            if poll {
                sleep = .zero
            } else if !hasDeadline && items.timers.isEmpty {
                sleep = nil  // until woken
            } else {
                sleep = timeout(items, deadline)
            }
            var ready = try waitForWork(timeout: sleep)
            if !poll { notify(.afterWaiting, items) }

            fireDueTimers(mode, items)
            if !ready.isEmpty {
                if handleReadyDescriptors(ready, items) { sourceHandled = true }
                ready.removeAll(keepingCapacity: true)
            }
            if readyBuffer.capacity < ready.capacity { swap(&readyBuffer, &ready) }
            runBlocks(mode)

            if sourceHandled && returnAfterSourceHandled { return .handledSource }
            if hasDeadline, let deadline, deadline <= .now { return .timedOut }
            if stopRequested.exchange(false, ordering: .acquiringAndReleasing) { return .stopped }
            if isEmpty(mode, items) { return .finished }
        }
    }

    func notify(_ activity: LoopActivity, _ items: ModeItems) {
        guard items.observedActivities.contains(activity) else { return }
        for observer in items.observers where observer.activities.contains(activity) {
            guard observer.isValid else { continue }
            if !observer.repeats { observer.invalidate() }
            observer.handler(observer, activity)
        }
    }

    private func performSignalledSources(_ items: ModeItems, stopAfterOne: Bool) -> Bool {
        signalled.perform(in: items, of: self, stopAfterOne: stopAfterOne)
    }

    func timeout(_ items: ModeItems, _ deadline: ContinuousClock.Instant?) -> Duration? {
        var wake = deadline
        if let next = nextTimerDate(items) { wake = min(wake ?? next, next) }
        return wake.map { $0 - .now }
    }

    private func nextTimerDate(_ items: ModeItems) -> ContinuousClock.Instant? {
        items.timers.top?.latest
    }

    private func fireDueTimers(_ mode: LoopMode, _ items: ModeItems) {
        guard !items.timers.isEmpty else { return }
        let now = ContinuousClock.now
        while let top = items.timers.top, top.latest <= now || top.fireDate <= now {
            // The timer stays in the mode, without an entry, while its handler runs.
            let timer = items.timers.popTop().timer
            timer.handler(timer)
            guard timer.isValid, timer.attachment.withLock({ $0.loop === self }) else { continue }
            if let interval = timer.interval {
                timer.setFireDate(timer.nextFireDate(after: .now, interval: interval))
                for mode in timer.attachment.withLock({ $0.modes }) { modes[mode]?.timers.reschedule(timer) }
            } else {
                timer.invalidate()
            }
        }
    }

    private func handleReadyDescriptors(_ ready: [PollEvent], _ items: ModeItems) -> Bool {
        var handled = false
        for event in ready {
            let source: DescriptorSource
            let token = SourceToken(event.token)
            if let last = lastReady, last.token == token, last.items === items {
                source = last.source
            } else {
                // Removed since the wait (maybe by an earlier handler): no callback.
                guard let found = descriptorSources[token] else { continue }
                guard items.descriptors[token] != nil else { park(found); continue }
                lastReady = (token, found, items)
                source = found
            }
            var events: DescriptorEvents = []
            if event.events.contains(.readable) { events.insert(.readable) }
            if event.events.contains(.writable) { events.insert(.writable) }
            if event.events.contains(.hangup) { events.insert(.hangup) }
            if event.events.contains(.error) { events.insert(.error) }
            source.handler(source, events)
            handled = true
        }
        return handled
    }
}
