import CPortKitSystem
import Glibc
import NamedPortServer

/// The daemon's signals as a descriptor source on a run loop: the signals are blocked in
/// every thread and read from a `signalfd`, so they arrive as ordinary loop callbacks on
/// the thread that runs the loop. No handler runs at an arbitrary point, and no thread of
/// its own waits for them.
final class SignalSource {
    private let descriptor: CInt
    private var source: DescriptorSource?

    /// Blocks `signals` in the calling thread, and so in every thread it starts later:
    /// call it before any other thread exists.
    /// - Throws: the errno of a failed `signalfd`.
    init(_ signals: [CInt]) throws(SignalSourceError) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        descriptor = signalfd(-1, &set, CInt(SFD_CLOEXEC | SFD_NONBLOCK))
        guard descriptor >= 0 else { throw SignalSourceError(errno: errno) }
    }

    deinit {
        source?.invalidate()
        close(descriptor)
    }

    /// Calls `handler` on `loop`'s thread with each signal received.
    func schedule(on loop: ThreadLoop, _ handler: @escaping @Sendable (CInt) -> Void) throws(ThreadLoopError) {
        let descriptor = self.descriptor
        let source = DescriptorSource(descriptor: descriptor, events: .readable) { _, _ in
            var info = signalfd_siginfo()
            while read(descriptor, &info, MemoryLayout<signalfd_siginfo>.size) == MemoryLayout<signalfd_siginfo>.size {
                handler(CInt(info.ssi_signo))
            }
        }
        try loop.add(source, forMode: .default)
        self.source = source
    }
}

/// `signalfd` failed.
struct SignalSourceError: Error {
    var errno: Int32
}
