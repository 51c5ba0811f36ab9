import PortKitSystem

// The mode table (loop thread): which timers, observers and sources each mode holds, the
// common modes and the propagation of `common` items into them, and the arming of
// descriptor sources as runs enter and leave modes.
extension ThreadLoop {
    func add(_ item: LoopItem, _ mode: LoopMode) throws(ThreadLoopError) {
        try checkOpen()
        try item.withAttachment { (a) throws(ThreadLoopError) in try a.attach(to: self) }
        // On the loop's thread, with no block made to carry the change.
        if isCurrent { return insert(item, into: mode) }
        onLoopThread { loop in loop.insert(item, into: mode) }
    }

    /// Changes from other threads travel through the inbox, which a loop that ended (or a
    /// stopped permanent thread's loop) no longer takes.
    func checkOpen() throws(ThreadLoopError) {
        if !isCurrent && inbox.isClosed { throw .loopEnded }
    }

    func remove(_ item: LoopItem, _ mode: LoopMode) {
        if isCurrent { return remove(item, from: mode) }
        onLoopThread { loop in loop.remove(item, from: mode) }
    }

    /// Told by an item's `invalidate()`: take it out of every mode.
    func itemInvalidated(_ item: LoopItem) {
        if isCurrent { return removeEverywhere(item) }
        onLoopThread { loop in loop.removeEverywhere(item) }
    }

    // MARK: Mode bookkeeping (loop thread)

    func items(of mode: LoopMode) -> ModeItems {
        if let items = existingItems(of: mode) { return items }
        let items = ModeItems()
        modes[mode] = items
        return items
    }

    /// `modes[mode]`, remembered for the next lookup of the same mode.
    @inline(__always)
    func existingItems(of mode: LoopMode) -> ModeItems? {
        if let last = lastModeItems, last.mode == mode { return last.items }
        guard let items = modes[mode] else { return nil }
        lastModeItems = (mode, items)
        return items
    }

    /// Carries out `change` in `mode`, or, for `common`, in every common mode once
    /// `recordCommon` has recorded it among the common items (false: nothing to do).
    private func inRealModes(
        of mode: LoopMode, recordCommon: () -> Bool, _ change: (LoopMode) -> Void
    ) {
        guard mode == .common else { return change(mode) }
        guard recordCommon() else { return }
        for common in commonModes { change(common) }
    }

    func insert(_ item: LoopItem, into mode: LoopMode) {
        guard item.withAttachment({ $0.isValid && $0.loop === self }) else { return }
        inRealModes(of: mode, recordCommon: { commonItems.insert(item) }) { insert(item, intoRealMode: $0) }
    }

    func insert(_ item: LoopItem, intoRealMode mode: LoopMode) {
        let target = items(of: mode)
        guard target.insert(item) else { return }
        let firstMode = item.withAttachment { a in a.modes.insert(mode); return a.modes.count == 1 }
        switch item {
        case .timer:
            break
        case .source(let source):
            source.onSchedule?(self, mode)
            // Signalled while in no mode of this loop (or before it was ever added): queued now.
            if source.isSignalled {
                signalled.add(source)
                wakeUp()
            }
        case .descriptor(let source):
            lastReady = nil
            if firstMode {
                descriptorSources[source.token] = source
                // Deregistered by a removal that was carried out after this add was made.
                let registered = source.attachment.withLock { a in defer { a.registered = true }; return a.registered }
                if !registered {
                    try? poller.register(FileDescriptor(rawValue: source.descriptor), interest: [], token: source.token.raw)
                }
            }
            // Armed now if the loop runs this mode; otherwise it stays parked until it does.
            if runStack.last == mode || firstMode {
                if armedOnAdd != source.token { parkedSources[source.token] = source }
                rearmParked(in: runStack.last)
            }
        case .observer:
            break
        }
    }

    func remove(_ item: LoopItem, from mode: LoopMode) {
        inRealModes(of: mode, recordCommon: { commonItems.remove(item) }) { remove(item, fromRealMode: $0) }
    }

    func remove(_ item: LoopItem, fromRealMode mode: LoopMode) {
        guard let target = existingItems(of: mode), target.remove(item) else { return }
        let lastMode = item.withAttachment { a in a.modes.remove(mode); return a.modes.isEmpty }
        switch item {
        case .timer:
            break
        case .source(let source):
            source.onCancel?(self, mode)
        case .descriptor(let source):
            lastReady = nil
            if lastMode {
                descriptorSources[source.token] = nil
                parkedSources[source.token] = nil
                try? poller.deregister(FileDescriptor(rawValue: source.descriptor))
                source.attachment.withLock { $0.registered = false }
            }
        case .observer:
            break
        }
        if lastMode {
            item.withAttachment { a in if a.loop === self { a.loop = nil } }
        }
    }

    private func removeEverywhere(_ item: LoopItem) {
        _ = commonItems.remove(item)
        for mode in item.withAttachment({ $0.modes }) { remove(item, fromRealMode: mode) }
    }

    /// Re-arms the parked descriptor sources of `mode` (after a run in another mode).
    func rearmParked(in mode: LoopMode?) {
        guard let mode, !parkedSources.isEmpty, let items = existingItems(of: mode) else { return }
        for (token, source) in parkedSources where items.descriptors[token] != nil {
            parkedSources[token] = nil
            try? poller.modify(FileDescriptor(rawValue: source.descriptor), interest: source.pollInterest, token: token.raw)
        }
    }

    func park(_ source: DescriptorSource) {
        parkedSources[source.token] = source
        try? poller.modify(FileDescriptor(rawValue: source.descriptor), interest: [], token: source.token.raw)
    }

    /// `commonModes.contains(mode)`, without hashing the mode's name on every pass: a run
    /// asks about the same mode again and again.
    func isCommon(_ mode: LoopMode) -> Bool {
        if let answer = commonModeAnswer, answer.version == commonModesVersion, answer.mode == mode {
            return answer.isCommon
        }
        let isCommon = commonModes.contains(mode)
        commonModeAnswer = (mode, commonModesVersion, isCommon)
        return isCommon
    }

    /// Nothing in the mode could make a run in it do anything.
    func isEmpty(_ mode: LoopMode) -> Bool {
        isEmpty(mode, existingItems(of: mode))
    }

    /// `isEmpty(mode)` when the run already has the mode's items (no dictionary lookup).
    func isEmpty(_ mode: LoopMode, _ items: ModeItems?) -> Bool {
        if let items, !items.hasNoSourcesOrTimers { return false }
        let modeIsCommon = isCommon(mode)
        return !held.contains { matches($0, mode, modeIsCommon: modeIsCommon) }
    }

}
