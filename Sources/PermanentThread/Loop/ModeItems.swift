/// What one mode of a loop holds. Touched only on the loop's thread.
///
/// `@exclusivity(unchecked)`: for the reason given on `ThreadLoop`'s loop-thread state (one
/// thread, no access held across a handler call); a pass reads these several times.
final class ModeItems {
    @exclusivity(unchecked) var timers = TimerHeap()
    /// The live timers of the mode (the heap may also hold stale entries).
    @exclusivity(unchecked) var timerIDs: Set<ObjectIdentifier> = []
    @exclusivity(unchecked) var observers: [LoopObserver] = []
    @exclusivity(unchecked) var sources: [LoopSource] = []
    @exclusivity(unchecked) var descriptors: [UInt64: DescriptorSource] = [:]
    /// The activities some observer of this mode watches, to skip empty notifications.
    @exclusivity(unchecked) var observedActivities: LoopActivity = []

    /// A mode with no timers and no sources has nothing that could wake a run in it.
    var hasNoSourcesOrTimers: Bool { timerIDs.isEmpty && sources.isEmpty && descriptors.isEmpty }

    /// Adds an item; returns false if it was already here.
    func insert(_ item: LoopItem) -> Bool {
        switch item {
        case .timer(let timer):
            return timerIDs.insert(ObjectIdentifier(timer)).inserted
        case .observer(let observer):
            guard !observers.contains(where: { $0 === observer }) else { return false }
            // Stable: after every observer of the same order.
            let index = observers.firstIndex { $0.order > observer.order } ?? observers.count
            observers.insert(observer, at: index)
            observedActivities.formUnion(observer.activities)
            return true
        case .source(let source):
            guard !sources.contains(where: { $0 === source }) else { return false }
            let index = sources.firstIndex { $0.order > source.order } ?? sources.count
            sources.insert(source, at: index)
            return true
        case .descriptor(let source):
            return descriptors.updateValue(source, forKey: source.token) == nil
        }
    }

    /// Removes an item; returns false if it was not here.
    func remove(_ item: LoopItem) -> Bool {
        switch item {
        case .timer(let timer):
            return timerIDs.remove(ObjectIdentifier(timer)) != nil
        case .observer(let observer):
            guard let index = observers.firstIndex(where: { $0 === observer }) else { return false }
            observers.remove(at: index)
            observedActivities = observers.reduce([]) { $0.union($1.activities) }
            return true
        case .source(let source):
            guard let index = sources.firstIndex(where: { $0 === source }) else { return false }
            sources.remove(at: index)
            return true
        case .descriptor(let source):
            return descriptors.removeValue(forKey: source.token) != nil
        }
    }
}
