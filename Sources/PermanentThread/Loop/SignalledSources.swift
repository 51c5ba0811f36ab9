import Synchronization

/// The custom sources of one loop that were signalled and not yet performed, so that a pass
/// visits those alone rather than every source of its mode (CoreFoundation keeps a flag per
/// source and scans them all; with a source per port, that made a message's cost grow with
/// the ports a loop holds).
///
/// `LoopSource.signal()` sets the source's flag, and the caller whose store set it pushes the
/// source onto `queue`: each signal that found the source unsignalled queues it once. The
/// loop's thread moves what was queued into `waiting`, and a pass in a mode performs those of
/// `waiting` that are in the mode, in the mode's order; the others wait for a pass in one of
/// their modes. An entry is dropped when it is met with its flag clear (performed meanwhile, or
/// a duplicate), its source invalid, or its source in no mode of this loop; a source added to
/// a mode while signalled is queued again (`ThreadLoop.insert`).
///
/// Every property but `queue` is touched on the loop's thread only; `@exclusivity(unchecked)`
/// for the reason given on `ThreadLoop`'s loop-thread state.
final class SignalledSources {
    /// Sources signalled from any thread, in the order of their signals.
    let queue = WorkQueue<LoopSource>()
    /// Sources taken from `queue` that wait for a pass in one of their modes.
    @exclusivity(unchecked) private var waiting: [LoopSource] = []
    /// `waiting`'s other buffer, so that sorting one pass's entries allocates nothing.
    @exclusivity(unchecked) private var scratch: [LoopSource] = []
    /// The sources one pass performs, in order, and how far it got. A run nested in one of
    /// their performs hands the rest back to `waiting` first (see `reclaimBatch`).
    @exclusivity(unchecked) private var batch: [Candidate] = []
    @exclusivity(unchecked) private var batchNext = 0
    /// How many entries passes have looked at, for tests: a pass visits signalled sources only.
    private let visitCount = Atomic<Int>(0)

    private struct Candidate {
        let order: Int
        let sequence: UInt64
        let source: LoopSource

        func precedes(_ other: Candidate) -> Bool {
            order != other.order ? order < other.order : sequence < other.sequence
        }
    }

    /// How many signalled-source entries the loop's passes have looked at.
    var visits: Int { visitCount.load(ordering: .relaxed) }

    /// Whether a signal waits in `queue`: for the loop's thread, before it sleeps.
    var hasQueued: Bool { queue.hasWaiting }

    /// A source added to a mode while signalled (loop thread).
    func add(_ source: LoopSource) { waiting.append(source) }

    /// The loop ended: later signals are refused, and what waits is dropped.
    func close() {
        queue.close()
        while queue.pop() != nil {}
        waiting = []
        scratch = []
        batch = []
        batchNext = 0
    }

    /// Performs the signalled sources of `items` (one pass's mode) in their order, or only the
    /// first with `stopAfterOne`; says whether any was performed.
    func perform(in items: ModeItems, of loop: ThreadLoop, stopAfterOne: Bool) -> Bool {
        reclaimBatch()
        while let source = queue.pop() { waiting.append(source) }
        guard !waiting.isEmpty else { return false }
        collect(in: items, of: loop)
        guard !batch.isEmpty else { return false }
        var handled = false
        while batchNext < batch.count {
            let source = batch[batchNext].source
            batchNext += 1
            // An earlier perform of this pass may have removed it from the mode: it stays
            // signalled for its other modes.
            guard items.sources[ObjectIdentifier(source)] != nil else { waiting.append(source); continue }
            guard source.signalled.exchange(false, ordering: .acquiringAndReleasing), source.isValid else { continue }
            source.onPerform()
            handled = true
            if stopAfterOne { break }
        }
        reclaimBatch()
        return handled
    }

    /// Moves the entries of `waiting` that are in `items` into `batch`, sorted; keeps those
    /// signalled for other modes of the loop; drops the rest.
    private func collect(in items: ModeItems, of loop: ThreadLoop) {
        swap(&waiting, &scratch)
        visitCount.store(visitCount.load(ordering: .relaxed) &+ scratch.count, ordering: .relaxed)
        for source in scratch {
            guard source.signalled.load(ordering: .acquiring) else { continue }
            if let slot = items.sources[ObjectIdentifier(source)] {
                batch.append(Candidate(order: source.order, sequence: slot.sequence, source: source))
            } else if source.attachment.withLock({ $0.isValid && $0.loop === loop && !$0.modes.isEmpty }) {
                waiting.append(source)
            }
        }
        scratch.removeAll(keepingCapacity: true)
        // A source queued twice (signalled, then added to a second mode) is performed once
        // all the same: the first perform clears its flag.
        if batch.count > 1 { batch.sort { $0.precedes($1) } }
    }

    /// Gives the sources of the current batch not yet performed back to `waiting`: at the end
    /// of a pass that stopped after one, and when a run nested in a perform starts its own
    /// pass (that pass then sees them, as CoreFoundation's nested pass sees their flags).
    private func reclaimBatch() {
        if batchNext < batch.count {
            for index in batchNext..<batch.count { waiting.append(batch[index].source) }
        }
        // Asked at least twice a pass, mostly of an empty batch: emptying an empty array
        // still runs the general range replacement.
        if !batch.isEmpty { batch.removeAll(keepingCapacity: true) }
        batchNext = 0
    }
}
