import Glibc
import NamedPortServer
import PermanentThread
import PortKitSystem

/// The daemon's signals as a descriptor source on a run loop: the signals are blocked in
/// every thread and read from a `signalfd`, so they arrive as ordinary loop callbacks on
/// the thread that runs the loop. No handler runs at an arbitrary point, and no thread of
/// its own waits for them.
final class SignalSource {
    private let descriptor: FileDescriptor
    private var source: DescriptorSource?

    /// Blocks `signals` in the calling thread, and so in every thread it starts later:
    /// call it before any other thread exists.
    /// - Throws: the errno of a failed `signalfd`.
    init(_ signals: [CInt]) throws(SignalSourceError) {
        do { descriptor = try SignalDescriptor.take(signals) } catch { throw SignalSourceError(errno: error.rawValue) }
    }

    deinit {
        source?.invalidate()
        try? descriptor.close()
    }

    /// Calls `handler` on `loop`'s thread with each signal received.
    func schedule(on loop: ThreadLoop, _ handler: @escaping @Sendable (CInt) -> Void) throws(ThreadLoopError) {
        let descriptor = self.descriptor
        let source = DescriptorSource(descriptor: descriptor.rawValue, events: .readable) { _, _ in
            for signal in SignalDescriptor.pending(on: descriptor) { handler(signal) }
        }
        try loop.add(source, forMode: .default)
        self.source = source
    }
}

/// `signalfd` failed.
struct SignalSourceError: Error {
    var errno: Int32
}
