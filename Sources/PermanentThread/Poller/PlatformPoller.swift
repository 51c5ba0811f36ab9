#if os(Linux)
import Glibc
import PortKitSystem

/// The poller of this platform's run loops: the one place that names the backends. On
/// Linux it is epoll (`EpollPoller`), or `poll(2)` (`PollPoller`) when the environment
/// variable `PORTKIT_POLLER` is `poll` as the process starts. A loop calls it directly
/// (a concrete type, each call one switch on the backend), not through an existential.
package final class PlatformPoller: Poller {
    private enum Backend {
        case epoll(EpollPoller)
        case poll(PollPoller)
    }

    private let backend: Backend

    /// Whether this process's loops use `poll(2)`: `PORTKIT_POLLER=poll`.
    package static let usesPoll: Bool = getenv("PORTKIT_POLLER").map { String(cString: $0) == "poll" } ?? false

    /// Makes the backend this process uses.
    package init() throws(Errno) {
        backend = Self.usesPoll ? .poll(try PollPoller()) : .epoll(try EpollPoller())
    }

    package func register(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        switch backend {
        case .epoll(let poller): try poller.register(descriptor, interest: interest, token: token)
        case .poll(let poller): try poller.register(descriptor, interest: interest, token: token)
        }
    }

    package func modify(_ descriptor: FileDescriptor, interest: PollEvents, token: UInt64) throws(Errno) {
        switch backend {
        case .epoll(let poller): try poller.modify(descriptor, interest: interest, token: token)
        case .poll(let poller): try poller.modify(descriptor, interest: interest, token: token)
        }
    }

    package func deregister(_ descriptor: FileDescriptor) throws(Errno) {
        switch backend {
        case .epoll(let poller): try poller.deregister(descriptor)
        case .poll(let poller): try poller.deregister(descriptor)
        }
    }

    package func prepareToSleep() -> PollerSleep {
        switch backend {
        case .epoll(let poller): poller.prepareToSleep()
        case .poll(let poller): poller.prepareToSleep()
        }
    }

    package func wait(timeout: Duration?, _ body: (PollEvent) -> Void) throws(Errno) -> Bool {
        switch backend {
        case .epoll(let poller): try poller.wait(timeout: timeout, body)
        case .poll(let poller): try poller.wait(timeout: timeout, body)
        }
    }

    package func wakeUp(_ sleep: PollerSleep) {
        switch backend {
        case .epoll(let poller): poller.wakeUp(sleep)
        case .poll(let poller): poller.wakeUp(sleep)
        }
    }

    package func close() {
        switch backend {
        case .epoll(let poller): poller.close()
        case .poll(let poller): poller.close()
        }
    }
}
#else
#error("PortKit has no poller backend for this platform: add one that implements Poller")
#endif
