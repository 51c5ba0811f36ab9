import Glibc
import PortKitSystem

/// What a descriptor is watched for, or was found ready for.
package struct PollEvents: OptionSet, Hashable, Sendable {
    package var rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Data can be read (or the peer closed: a read returns 0).
    package static let readable = PollEvents(rawValue: 1 << 0)
    /// Data can be written without blocking.
    package static let writable = PollEvents(rawValue: 1 << 1)
    /// The peer hung up.
    package static let hangup = PollEvents(rawValue: 1 << 2)
    /// An error is pending on the descriptor.
    package static let error = PollEvents(rawValue: 1 << 3)
}

/// One ready descriptor, named by the token it was registered with.
package struct PollEvent: Sendable {
    /// The token given to `register`.
    package var token: UInt64
    /// What the descriptor is ready for.
    package var events: PollEvents
}

/// How a poller sleeps; the poller chooses, for each sleep, in `Poller.prepareToSleep()`.
package enum PollerSleep: Sendable {
    /// Nothing is watched: a sleep that only a wake-up or the timeout ends, the cheapest
    /// the platform has (on Linux a futex: one system call to wake).
    case unwatched
    /// Descriptors are watched: a sleep in the readiness set, which a wake-up enters
    /// through the set's own wake-up descriptor.
    case watching
}

/// The readiness backend behind a run loop: one small type per operating system.
///
/// The loop knows nothing of the kernel's interface; it registers descriptors under
/// tokens, waits until a timeout or a wake-up, and is woken. The backend decides how each
/// wait sleeps: a loop that watches no descriptor sleeps in the cheapest way there is.
/// `PlatformPoller` names the backend this platform builds.
///
/// The sleep handshake: the loop's thread calls `prepareToSleep()`, publishes the kind of
/// sleep it returned, looks for work once more, then calls `wait`; a waker that finds the
/// loop asleep claims the sleep and calls `wakeUp(_:)` with that kind. A wake-up delivered
/// between `prepareToSleep()` and `wait` ends the wait at once: none is lost.
///
/// A second backend (kqueue, say) is one new file with a type that implements these
/// calls: `register`, `modify` and `deregister` as `EV_ADD`, `EV_ENABLE`/`EV_DISABLE` and
/// `EV_DELETE` of `EVFILT_READ`/`EVFILT_WRITE` events carrying the token in `udata`;
/// `wait` as `kevent` with a `timespec`; `wakeUp` as an `EVFILT_USER` trigger (and, for
/// `.unwatched`, whatever wakes a thread cheapest there, or the same trigger); plus its
/// line in `PlatformPoller.swift`.
package protocol Poller: AnyObject {
    /// Starts watching `descriptor` for `interest`; ready events carry `token`. Safe from
    /// any thread; a descriptor registered from another thread should be registered with
    /// no interest (parked) and armed with `modify` on the loop's thread.
    func register(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno)
    /// Changes what a registered descriptor is watched for; an empty set parks it.
    func modify(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno)
    /// Stops watching `descriptor`, which was registered.
    func deregister(_ descriptor: FileDescriptor) throws(Errno)
    /// Chooses the next `wait`'s sleep and arms it, so that a wake-up of that kind from
    /// now on ends it. Called on the loop's thread, before the loop says it sleeps.
    func prepareToSleep() -> PollerSleep
    /// Waits until a descriptor is ready, a wake-up comes, or `timeout` passes (`nil` waits
    /// for ever, `.zero` only polls); after `prepareToSleep()`, sleeps as it chose. Calls
    /// `body` once per ready descriptor and returns whether a wake-up was consumed.
    func wait(timeout: Duration?, _ body: (PollEvent) -> Void) throws(Errno) -> Bool
    /// Ends a current or the next sleep of kind `sleep` (what `prepareToSleep()` returned
    /// for it). Safe from any thread.
    func wakeUp(_ sleep: PollerSleep)
    /// Closes the backend's descriptors. Called once, on the loop's thread.
    func close()
}
