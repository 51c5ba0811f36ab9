import Glibc
import CPortKitSystem
import Synchronization

/// The Linux poller: one epoll instance and one eventfd for wake-ups.
///
/// Timers need no descriptor of their own: `wait` passes the earliest deadline to
/// `epoll_pwait2`, which takes a nanosecond timeout, so nothing is re-armed per timer.
package final class EpollPoller: Poller {
    private let epoll: FileDescriptor
    private let wakeEvent: FileDescriptor
    private let capacity = 64
    private let buffer: UnsafeMutablePointer<epoll_event>

    /// How many wake-up writes were made: tests prove wakes are coalesced with it.
    package var wakeWrites: Int { writes.load(ordering: .relaxed) }
    private let writes = Atomic<Int>(0)

    /// The token reserved for the wake-up eventfd.
    private static let wakeToken = UInt64.max

    /// Makes the epoll instance and the eventfd.
    package init() throws(Errno) {
        epoll = FileDescriptor(rawValue: try valueOrErrno { epoll_create1(CInt(EPOLL_CLOEXEC)) }.get())
        do {
            wakeEvent = FileDescriptor(rawValue: try valueOrErrno {
                eventfd(0, CInt(EFD_CLOEXEC) | CInt(EFD_NONBLOCK))
            }.get())
        } catch {
            try? epoll.close()
            throw error
        }
        buffer = .allocate(capacity: capacity)
        do {
            try register(wakeEvent, interest: .readable, token: Self.wakeToken)
        } catch {
            try? wakeEvent.close()
            try? epoll.close()
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
        var event = epoll_event()
        event.events = Self.epollMask(interest)
        event.data.u64 = token
        try nothingOrErrno { epoll_ctl(epoll.rawValue, op, descriptor.rawValue, &event) }.get()
    }

    /// Starts watching a descriptor. The corresponding C function is `epoll_ctl`.
    package func register(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        try control(EPOLL_CTL_ADD, descriptor, interest, token)
    }

    /// Changes the interest of a watched descriptor. The corresponding C function is `epoll_ctl`.
    package func modify(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        try control(EPOLL_CTL_MOD, descriptor, interest, token)
    }

    /// Stops watching a descriptor. The corresponding C function is `epoll_ctl`.
    package func deregister(_ descriptor: FileDescriptor) throws(Errno) {
        try control(EPOLL_CTL_DEL, descriptor, [], 0)
    }

    /// Waits for readiness. The corresponding C function is `epoll_pwait2`.
    package func wait(timeout: Duration?, _ body: (PollEvent) -> Void) throws(Errno) -> Bool {
        let count: CInt
        if let timeout {
            let (seconds, attoseconds) = max(timeout, .zero).components
            var spec = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
            count = try valueOrErrno { epoll_pwait2(epoll.rawValue, buffer, CInt(capacity), &spec, nil) }.get()
        } else {
            count = try valueOrErrno { epoll_pwait2(epoll.rawValue, buffer, CInt(capacity), nil, nil) }.get()
        }
        var woken = false
        for index in 0..<Int(count) {
            let raw = buffer[index]
            let token = raw.data.u64
            if token == Self.wakeToken {
                var value: UInt64 = 0
                _ = withUnsafeMutableBytes(of: &value) { try? wakeEvent.read(into: $0) }
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

    /// Wakes a waiting (or the next) `wait`. The corresponding C function is `eventfd_write`.
    package func wakeUp() {
        writes.add(1, ordering: .relaxed)
        var one: UInt64 = 1
        // EAGAIN means the counter is saturated: a wake-up is pending anyway.
        _ = withUnsafeBytes(of: &one) { try? wakeEvent.write($0) }
    }

    /// Closes the epoll instance and the eventfd.
    package func close() {
        try? wakeEvent.close()
        try? epoll.close()
        buffer.deallocate()
    }
}
