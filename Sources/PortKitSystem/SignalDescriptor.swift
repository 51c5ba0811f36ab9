import CPortKitSystem
import Glibc

/// Signals taken as data: blocked in every thread and read from a `signalfd`, so that a
/// loop receives them as ordinary descriptor events (a daemon's SIGTERM, say). No handler
/// runs at an arbitrary point.
package enum SignalDescriptor {
    /// Blocks `signals` in the calling thread, and so in every thread it starts later (call
    /// it before any other thread exists), and returns a non-blocking, close-on-exec
    /// descriptor they can be read from.
    ///
    /// The corresponding C functions are `pthread_sigmask` and `signalfd`.
    package static func take(_ signals: [CInt]) throws(Errno) -> FileDescriptor {
        var set = SignalMask.set(of: signals)
        pthread_sigmask(SIG_BLOCK, &set, nil)
        return FileDescriptor(rawValue: try valueOrErrno { signalfd(-1, &set, CInt(SFD_CLOEXEC | SFD_NONBLOCK)) }.get())
    }

    /// The signals waiting on `descriptor` (one of `take`'s), in the order they came;
    /// none once it is drained.
    ///
    /// The corresponding C function is `read`, of `signalfd_siginfo` records.
    package static func pending(on descriptor: FileDescriptor) -> [CInt] {
        var signals: [CInt] = []
        var info = signalfd_siginfo()
        let size = MemoryLayout<signalfd_siginfo>.size
        while (try? withUnsafeMutableBytes(of: &info) { (raw) throws(Errno) -> Int in try descriptor.read(into: raw) }) == size {
            signals.append(CInt(info.ssi_signo))
        }
        return signals
    }
}

/// The calling thread's signal mask.
package enum SignalMask {
    /// Lets `signals` through to the calling thread (a thread inherits its creator's mask).
    ///
    /// The corresponding C function is `pthread_sigmask` with `SIG_UNBLOCK`.
    package static func unblock(_ signals: [CInt]) {
        var set = set(of: signals)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// The signal set of `signals`.
    static func set(of signals: [CInt]) -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        return set
    }
}
