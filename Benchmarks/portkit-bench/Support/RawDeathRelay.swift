import CPortKitSystem
import Glibc

/// A baseline of `names.death`: the least a server in between costs. A relay thread
/// watches the victims' sockets in an epoll set and, when one hangs up, closes it and
/// writes one byte to the watcher's socket, which the caller polls. Like the name server,
/// the relay sleeps in `epoll_wait` when the victim is killed, and telling the watcher is
/// one more thread wake-up than `raw` (where the caller polls the victim's socket itself).
final class RawDeathRelay: Sendable {
    private let epoll: CInt
    /// The caller's end of the control channel (victims' descriptors go in, acks come back).
    private let control: CInt
    private let relayControl: CInt
    /// The caller's end of the watcher channel.
    private let watcher: CInt
    private let relayWatcher: CInt
    private let thread: PosixThread

    /// Starts the relay thread.
    /// - Throws: `BenchmarkError.system` when a descriptor or the thread cannot be made.
    init() throws(BenchmarkError) {
        let controlPair = try RawSockets.streamPair()
        let watcherPair = try RawSockets.streamPair()
        let epoll = try RawSockets.epoll(watchingInput: controlPair.1)
        self.epoll = epoll
        control = controlPair.0
        relayControl = controlPair.1
        watcher = watcherPair.0
        relayWatcher = watcherPair.1
        let relayControl = controlPair.1
        let relayWatcher = watcherPair.1
        thread = try PosixThread.start(name: "bench-raw-relay") { Self.relay(epoll, relayControl, relayWatcher) }
    }

    /// Hands `socket` to the relay and waits until it watches it; the relay closes it once
    /// its peer hangs up.
    func watch(_ socket: CInt) throws {
        var descriptor = socket
        var ack: UInt8 = 0
        guard send(control, &descriptor, MemoryLayout<CInt>.size, CInt(MSG_NOSIGNAL)) == MemoryLayout<CInt>.size,
              recv(control, &ack, 1, CInt(MSG_WAITALL)) == 1 else {
            throw BenchmarkError.lastSystemError("hand the socket to the relay")
        }
    }

    /// Kills `victim`, which holds the peer of a socket the relay watches, and times until
    /// the watcher's byte arrives.
    func killAndAwaitWord(_ victim: pid_t) throws -> Duration {
        var told: UInt8 = 0
        let elapsed = killAndTime(victim, untilReadable: watcher)
        guard let elapsed, recv(watcher, &told, 1, 0) == 1 else { throw BenchmarkError.timedOut("the relay to tell of the death") }
        return elapsed
    }

    /// Ends the relay thread and closes every descriptor.
    func stop() {
        shutdown(control, CInt(SHUT_RDWR))
        thread.join()
        close(control)
        close(relayControl)
        close(watcher)
        close(relayWatcher)
        close(epoll)
    }

    private static func relay(_ epoll: CInt, _ control: CInt, _ watcher: CInt) {
        var events = [epoll_event](repeating: epoll_event(), count: 8)
        var watched: Set<CInt> = []
        relaying: while true {
            let count = events.withUnsafeMutableBufferPointer { epoll_wait(epoll, $0.baseAddress, 8, -1) }
            if count < 0 { if errno == EINTR { continue } else { break } }
            for index in 0..<Int(count) {
                let socket = events[index].data.fd
                if socket == control {
                    var descriptor: CInt = -1
                    guard recv(control, &descriptor, MemoryLayout<CInt>.size, CInt(MSG_WAITALL)) == MemoryLayout<CInt>.size else {
                        break relaying
                    }
                    var interest = epoll_event()
                    interest.events = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
                    interest.data.fd = descriptor
                    epoll_ctl(epoll, EPOLL_CTL_ADD, descriptor, &interest)
                    watched.insert(descriptor)
                    var ack: UInt8 = 1
                    _ = send(control, &ack, 1, CInt(MSG_NOSIGNAL))
                } else {
                    var byte: UInt8 = 0
                    let read = recv(socket, &byte, 1, CInt(MSG_DONTWAIT))
                    guard read == 0 || (read < 0 && errno != EAGAIN && errno != EINTR) else { continue }
                    // Told first, closed after: as the name server does.
                    var told: UInt8 = 1
                    _ = send(watcher, &told, 1, CInt(MSG_NOSIGNAL))
                    epoll_ctl(epoll, EPOLL_CTL_DEL, socket, nil)
                    close(socket)
                    watched.remove(socket)
                }
            }
        }
        for socket in watched { close(socket) }
    }
}

/// Sends SIGKILL to `pid`, waits up to 10 s for `descriptor` to become readable, and reaps
/// `pid`; returns the time from the kill to the readiness, or nil if it did not come.
func killAndTime(_ pid: pid_t, untilReadable descriptor: CInt) -> Duration? {
    let start = ContinuousClock.now
    kill(pid, SIGKILL)
    var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    let ready = poll(&poller, 1, 10_000)
    let elapsed = start.duration(to: .now)
    var status: CInt = 0
    waitpid(pid, &status, 0)
    return ready == 1 ? elapsed : nil
}
