import Glibc
import CPortKitSystem
import Synchronization
import PortKitSystem

/// The Linux poller: one epoll instance and one eventfd for wake-ups, and a futex word
/// for the sleeps of a loop that watches no descriptor.
///
/// While no descriptor is registered, a sleep is on the futex (`WakeWord`): one system
/// call to wake and no epoll callback; a poll then costs no system call at all. Once one
/// is registered, sleeps are in `epoll_pwait2`, woken through the eventfd. Timers need no
/// descriptor of their own: `wait` passes the earliest deadline to `epoll_pwait2`, which
/// takes a nanosecond timeout, so nothing is re-armed per timer.
///
/// The sleep choice and the event buffer are the loop's thread's alone (`prepareToSleep`,
/// `wait`, `close`); what other threads reach (`register`, `wakeUp`) is the kernel's, the
/// futex word's and the `registered` atomic.
package final class EpollPoller: Poller {
    private let epoll: Epoll
    private let wakeEvent: WakeEvent
    /// Which sleep the next wait takes, and the futex an unwatched one waits on.
    private let sleeps = SleepChoice()
    /// How many descriptors are in the epoll set (besides the eventfd).
    private let registered = Atomic<Int>(0)
    private let buffer: UnsafeMutableBufferPointer<epoll_event>

    /// The token reserved for the wake-up eventfd.
    private static let wakeToken = UInt64.max

    /// Makes the epoll instance and the eventfd.
    package init() throws(Errno) {
        epoll = try Epoll()
        do {
            wakeEvent = try WakeEvent()
        } catch {
            epoll.close()
            throw error
        }
        buffer = .allocate(capacity: 64)
        do {
            // Edge-triggered: every write to the eventfd reports it once, so the loop never
            // reads it back (one system call less per wake-up); see `wakeUp()`.
            try epoll.control(
                EPOLL_CTL_ADD, wakeEvent.descriptor, events: EPOLLIN.rawValue | EPOLLET.rawValue, token: Self.wakeToken)
        } catch {
            wakeEvent.close()
            epoll.close()
            buffer.deallocate()
            throw error
        }
    }

    private static func epollMask(_ interest: PollEvents) -> UInt32 {
        var mask: UInt32 = 0
        if interest.contains(.readable) { mask |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if interest.contains(.writable) { mask |= EPOLLOUT.rawValue }
        if interest.contains(.hangup) { mask |= EPOLLRDHUP.rawValue }
        return mask
    }

    private func control(_ op: CInt, _ descriptor: FileDescriptor, _ interest: PollEvents, _ token: UInt64) throws(Errno) {
        try epoll.control(op, descriptor, events: Self.epollMask(interest), token: token)
    }

    /// Starts watching a descriptor. The corresponding C function is `epoll_ctl`.
    package func register(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        try control(EPOLL_CTL_ADD, descriptor, interest, token)
        registered.add(1, ordering: .relaxed)
    }

    /// Changes the interest of a watched descriptor. The corresponding C function is `epoll_ctl`.
    package func modify(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        try control(EPOLL_CTL_MOD, descriptor, interest, token)
    }

    /// Stops watching a descriptor. The corresponding C function is `epoll_ctl`.
    package func deregister(_ descriptor: FileDescriptor) throws(Errno) {
        do {
            try control(EPOLL_CTL_DEL, descriptor, [], 0)
        } catch {
            // EBADF: closed before it was removed, which took it out of the set.
            if error == .badFileDescriptor { registered.subtract(1, ordering: .relaxed) }
            throw error
        }
        registered.subtract(1, ordering: .relaxed)
    }

    /// The futex while no descriptor is registered, else epoll. A descriptor registered
    /// from another thread meanwhile is parked (no events), so a futex sleep misses nothing;
    /// the change that arms it comes through the loop's inbox, which wakes the futex.
    package func prepareToSleep() -> PollerSleep {
        sleeps.prepare(watching: registered.load(ordering: .relaxed) > 0)
    }

    /// Waits for readiness. The corresponding C function is `epoll_pwait2` (or `epoll_wait`),
    /// or the futex's wait while no descriptor is registered.
    package func wait(timeout: Duration?, _ body: (PollEvent) -> Void) throws(Errno) -> Bool {
        if sleeps.take(orElse: registered.load(ordering: .relaxed) > 0 ? .watching : .unwatched) == .unwatched {
            sleeps.sleep(timeout: timeout)
            return false
        }
        let count = try epoll.wait(into: buffer, timeout: timeout)
        return dispatch(count, body)
    }

    private func dispatch(_ count: Int, _ body: (PollEvent) -> Void) -> Bool {
        var woken = false
        for index in 0..<count {
            let raw = buffer[index]
            let token = raw.data.u64
            if token == Self.wakeToken {
                // Not read: the eventfd is edge-triggered, and its counter only grows.
                woken = true
                continue
            }
            var events: PollEvents = []
            if raw.events & EPOLLIN.rawValue != 0 { events.insert(.readable) }
            if raw.events & EPOLLOUT.rawValue != 0 { events.insert(.writable) }
            if raw.events & (EPOLLHUP.rawValue | EPOLLRDHUP.rawValue) != 0 { events.insert(.hangup) }
            if raw.events & EPOLLERR.rawValue != 0 { events.insert(.error) }
            body(PollEvent(token: token, events: events))
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

    /// Closes the epoll instance and the eventfd.
    package func close() {
        wakeEvent.close()
        epoll.close()
        buffer.deallocate()
    }
}
