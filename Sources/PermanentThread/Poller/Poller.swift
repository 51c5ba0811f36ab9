import Glibc

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

/// The readiness backend behind a run loop: one small type per operating system.
///
/// The loop core knows nothing of epoll; it registers descriptors under tokens, waits,
/// and is woken. Only `wakeUp()` may be called from a thread other than the loop's.
package protocol Poller: AnyObject {
    /// Starts watching `descriptor` for `interest`; ready events carry `token`.
    func register(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno)
    /// Changes what a registered descriptor is watched for; an empty set parks it.
    func modify(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno)
    /// Stops watching `descriptor`.
    func deregister(_ descriptor: FileDescriptor) throws(Errno)
    /// Waits until a descriptor is ready, `wakeUp()` is called, or `timeout` passes
    /// (`nil` waits for ever, `.zero` only polls). Calls `body` once per ready descriptor
    /// and returns whether a wake-up was consumed.
    func wait(timeout: Duration?, _ body: (PollEvent) -> Void) throws(Errno) -> Bool
    /// Makes a current or the next `wait` return. Safe from any thread.
    func wakeUp()
    /// Closes the backend's descriptors. Called once, on the loop's thread.
    func close()
}
