import Glibc
import PortKitSystem

// The per-thread registry: one loop per thread, made on first use, kept in a
// thread-local slot whose destructor tears the loop down when its thread exits.
extension ThreadLoop {
    // MARK: One loop per thread

    /// The loop of the calling thread, made on first use.
    ///
    /// Traps only if the process is out of descriptors when the loop is first made; use
    /// `forCurrentThread()` to get that as an error instead.
    public static var current: ThreadLoop {
        do {
            return try forCurrentThread()
        } catch {
            fatalError("ThreadLoop.current: cannot make a loop for this thread: \(error)")
        }
    }

    /// The loop of the calling thread, made on first use; throws if it cannot be made.
    public static func forCurrentThread() throws(ThreadLoopError) -> ThreadLoop {
        if let raw = pthread_getspecific(loopKey) {
            return Unmanaged<ThreadLoop>.fromOpaque(raw).takeUnretainedValue()
        }
        let loop = ThreadIdentity.isMainThread ? mainLoop : try ThreadLoop(name: ThreadIdentity.name)
        // The loop sleeps exactly until its next timer (tolerance is its own business), so
        // the kernel's default 50 µs of slack on the sleep is taken away.
        ThreadIdentity.setTimerSlack(nanoseconds: 1)
        pthread_setspecific(loopKey, Unmanaged.passRetained(loop).toOpaque())
        return loop
    }

    /// The calling thread's loop if it is running now (the caller is inside one of its
    /// callbacks); `nil` otherwise. Never makes a loop.
    package static var running: ThreadLoop? {
        guard let raw = pthread_getspecific(loopKey) else { return nil }
        let loop = Unmanaged<ThreadLoop>.fromOpaque(raw).takeUnretainedValue()
        return loop.runStack.isEmpty ? nil : loop
    }

    /// The main thread's loop. Usable from any thread; it runs when the main thread runs it.
    public static var main: ThreadLoop { mainLoop }

    /// Whether the calling thread is this loop's thread.
    public var isCurrent: Bool {
        pthread_getspecific(loopKey) == identity
    }

    /// The loop's address, which names it while it lives: what another module keeps in an
    /// atomic to tell whether a loop is the calling thread's (`currentIdentity`) with no
    /// lock and no reference counting.
    package var identity: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    /// The `identity` of the calling thread's loop, `nil` when it has none. Never makes a loop.
    package static var currentIdentity: UnsafeMutableRawPointer? { pthread_getspecific(loopKey) }

    /// Called by the thread-exit destructor: cancel everything and close descriptors.
    fileprivate func threadDidEnd() {
        // Closed first, released after: a dropped block may hold the last reference to
        // something whose deinit calls back into this loop (and finds it closed). Producers
        // that reserved a slot before the close finish writing it; `pop` waits for them.
        inbox.close()
        var dropped: [Work] = []
        while let work = inbox.pop() { dropped.append(work) }
        _ = consume dropped
        ended = true
        signalled.close()
        for (mode, items) in modes {
            for source in items.sourcesInOrder { source.onCancel?(self, mode) }
        }
        var everything: [LoopItem] = []
        for items in modes.values {
            everything += items.observers.map(LoopItem.observer) + items.sources.values.map { LoopItem.source($0.source) }
            everything += items.descriptors.values.map(LoopItem.descriptor)
            everything += items.timers.members.map(LoopItem.timer)
        }
        for item in everything {
            item.withAttachment { attachment in
                if attachment.loop === self { attachment = Attachment(loop: nil, isValid: attachment.isValid) }
            }
        }
        modes.removeAll()
        lastModeItems = nil
        held.removeAll()
        spare = []
        descriptorSources.removeAll()
        parkedSources.removeAll()
        lastReady = nil
        commonItems.timers = TimerHeap()
        // No new wake can be claimed (the loop is awake and the inbox closed); let the ones
        // in flight land. Sequentially consistent: a claim made during the last sleep was
        // counted before it, so this load sees it.
        while wakesInFlight.load(ordering: .sequentiallyConsistent) > 0 { sched_yield() }
        poller.close()
    }
}


/// The thread-local slot holding each thread's loop; its destructor ends the loop when
/// the thread exits.
private let loopKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
        guard let raw else { return }
        let loop = Unmanaged<ThreadLoop>.fromOpaque(raw).takeRetainedValue()
        loop.threadDidEnd()
    }
    precondition(status == 0, "pthread_key_create failed: \(status)")
    return key
}()

private let mainLoop: ThreadLoop = {
    do {
        return try ThreadLoop(name: "main")
    } catch {
        fatalError("ThreadLoop.main: cannot make the main loop: \(error)")
    }
}()
