/// What one mode of a loop holds. Touched only on the loop's thread.
///
/// `@exclusivity(unchecked)`: for the reason given on `ThreadLoop`'s loop-thread state (one
/// thread, no access held across a handler call); a pass reads these several times.
final class ModeItems {
    @exclusivity(unchecked) var timers = TimerHeap()
    @exclusivity(unchecked) var observers: [LoopObserver] = []
    /// The custom sources, by identity: a pass looks up only the signalled ones (see
    /// `SignalledSources`), so membership is a hash lookup, and order a sequence number.
    @exclusivity(unchecked) var sources: [ObjectIdentifier: SourceSlot] = [:]
    @exclusivity(unchecked) var descriptors: [SourceToken: DescriptorSource] = [:]
    /// The activities some observer of this mode watches, to skip empty notifications.
    @exclusivity(unchecked) var observedActivities: LoopActivity = []
    /// The last sequence number given to a source added to this mode.
    @exclusivity(unchecked) private var sourceSequence: UInt64 = 0

    /// A source of the mode and when it was added: sources of one order are performed in
    /// the order they were added.
    struct SourceSlot {
        let source: LoopSource
        let sequence: UInt64
    }

    /// A mode with no timers and no sources has nothing that could wake a run in it.
    var hasNoSourcesOrTimers: Bool { timers.isEmpty && sources.isEmpty && descriptors.isEmpty }

    /// The custom sources in the order they are performed: ascending order, then as added.
    var sourcesInOrder: [LoopSource] {
        sources.values.sorted { a, b in
            a.source.order != b.source.order ? a.source.order < b.source.order : a.sequence < b.sequence
        }.map(\.source)
    }

    /// Adds an item (a timer at its fire date); returns false if it was already here.
    func insert(_ item: LoopItem) -> Bool {
        switch item {
        case .timer(let timer):
            return timers.insert(timer)
        case .observer(let observer):
            guard !observers.contains(where: { $0 === observer }) else { return false }
            // Stable: after every observer of the same order.
            let index = observers.firstIndex { $0.order > observer.order } ?? observers.count
            observers.insert(observer, at: index)
            observedActivities.formUnion(observer.activities)
            return true
        case .source(let source):
            let id = ObjectIdentifier(source)
            guard sources[id] == nil else { return false }
            sourceSequence &+= 1
            sources[id] = SourceSlot(source: source, sequence: sourceSequence)
            return true
        case .descriptor(let source):
            return descriptors.updateValue(source, forKey: source.token) == nil
        }
    }

    /// Removes an item; returns false if it was not here.
    func remove(_ item: LoopItem) -> Bool {
        switch item {
        case .timer(let timer):
            return timers.remove(timer)
        case .observer(let observer):
            guard let index = observers.firstIndex(where: { $0 === observer }) else { return false }
            observers.remove(at: index)
            observedActivities = observers.reduce([]) { $0.union($1.activities) }
            return true
        case .source(let source):
            return sources.removeValue(forKey: ObjectIdentifier(source)) != nil
        case .descriptor(let source):
            return descriptors.removeValue(forKey: source.token) != nil
        }
    }
}
