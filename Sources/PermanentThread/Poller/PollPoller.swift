import Glibc
import PortKitSystem
import PortKitLocks

/// A second Linux poller, on `poll(2)`: what `PORTKIT_POLLER=poll` selects. Every wait
/// hands the kernel the whole set of armed descriptors, so it costs more per wait than
/// epoll as the set grows; it exists to keep the `Poller` boundary honest (the run loop's
/// tests pass on it) and for a system where epoll is not allowed.
///
/// The set lives here, under a lock: `register`, `modify` and `deregister` change it from
/// any thread, and each `wait` takes a copy of the armed entries. A descriptor parked (no
/// interest) is left out of the copy, so, unlike epoll, it reports nothing, not even a
/// hang-up; the loop arms descriptors on its own thread, between waits, so no change is
/// missed. Wake-ups go through an eventfd, which the wait drains when it reports it; while
/// no descriptor is registered, a sleep is on a futex word, as `EpollPoller`'s is.
package final class PollPoller: Poller {
    private struct Watch {
        var interest: PollEvents
        var token: UInt64
    }

    private let watches = Locked<[CInt: Watch]>([:])
    private let wakeEvent: WakeEvent
    /// Which sleep the next wait takes, and the futex an unwatched one waits on.
    private let sleeps = SleepChoice()

    /// Makes the wake-up eventfd.
    package init() throws(Errno) {
        wakeEvent = try WakeEvent()
    }

    /// Starts watching a descriptor. Refused as epoll refuses it: `EBADF` for a descriptor
    /// that is not open, `EPERM` for a regular file or a directory (always ready), `EEXIST`
    /// when it is watched already.
    package func register(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        let kind = try descriptor.fileType()
        if kind == S_IFREG || kind == S_IFDIR { throw Errno(rawValue: EPERM) }
        try watches.withLock { (watches) throws(Errno) in
            guard watches[descriptor.rawValue] == nil else { throw .alreadyExists }
            watches[descriptor.rawValue] = Watch(interest: interest, token: token)
        }
    }

    /// Changes the interest of a watched descriptor (`ENOENT` when it is not watched).
    package func modify(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        try watches.withLock { (watches) throws(Errno) in
            guard watches[descriptor.rawValue] != nil else { throw .noSuchFile }
            watches[descriptor.rawValue] = Watch(interest: interest, token: token)
        }
    }

    /// Stops watching a descriptor (`ENOENT` when it is not watched).
    package func deregister(_ descriptor: FileDescriptor) throws(Errno) {
        try watches.withLock { (watches) throws(Errno) in
            guard watches.removeValue(forKey: descriptor.rawValue) != nil else { throw .noSuchFile }
        }
    }

    /// The futex while no descriptor is registered, else `poll`.
    package func prepareToSleep() -> PollerSleep {
        sleeps.prepare(watching: !watches.withLock { $0.isEmpty })
    }

    /// Waits for readiness. The corresponding C function is `ppoll`, over the armed
    /// descriptors and the wake-up eventfd (`ppoll` for a nanosecond timeout).
    package func wait(timeout: Duration?, _ body: (PollEvent) -> Void) throws(Errno) -> Bool {
        if sleeps.take(orElse: .watching) == .unwatched {
            sleeps.sleep(timeout: timeout)
            return false
        }
        let armed = watches.withLock { watches in watches.filter { !$0.value.interest.isEmpty } }
        var set = [pollfd(fd: wakeEvent.descriptor.rawValue, events: Int16(POLLIN), revents: 0)]
        var tokens: [UInt64] = [0]
        for (descriptor, watch) in armed {
            set.append(pollfd(fd: descriptor, events: Self.pollMask(watch.interest), revents: 0))
            tokens.append(watch.token)
        }
        guard try FileDescriptor.poll(&set, timeout: timeout) > 0 else { return false }
        var woken = false
        if set[0].revents & Int16(POLLIN) != 0 {
            wakeEvent.drain()
            woken = true
        }
        for index in set.indices.dropFirst() where set[index].revents != 0 {
            let events = Self.events(set[index].revents)
            if !events.isEmpty { body(PollEvent(token: tokens[index], events: events)) }
        }
        return woken
    }

    /// Wakes a waiting (or the next) `wait`: the futex's wake for an unwatched sleep, else
    /// a write to the eventfd.
    package func wakeUp(_ sleep: PollerSleep) {
        if sleep == .unwatched {
            sleeps.wake()
            return
        }
        wakeEvent.signal()
    }

    /// Closes the eventfd.
    package func close() {
        wakeEvent.close()
    }

    /// `POLLRDHUP` (a peer's shutdown of its writing half), which Glibc's module leaves out.
    private static let peerHangup: Int16 = 0x2000

    private static func pollMask(_ interest: PollEvents) -> Int16 {
        var mask: Int16 = 0
        if interest.contains(.readable) { mask |= Int16(POLLIN) | peerHangup }
        if interest.contains(.writable) { mask |= Int16(POLLOUT) }
        if interest.contains(.hangup) { mask |= peerHangup }
        return mask
    }

    private static func events(_ revents: Int16) -> PollEvents {
        var events: PollEvents = []
        if revents & Int16(POLLIN) != 0 { events.insert(.readable) }
        if revents & Int16(POLLOUT) != 0 { events.insert(.writable) }
        if revents & (Int16(POLLHUP) | peerHangup) != 0 { events.insert(.hangup) }
        if revents & Int16(POLLERR) != 0 { events.insert(.error) }
        return events
    }
}
