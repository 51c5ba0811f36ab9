import CPortKitSystem
import Glibc

/// The eventfd a Linux poller is woken through while it watches descriptors: any thread
/// signals it, the poller watches it beside the loop's descriptors.
package struct WakeEvent {
    /// The eventfd (close-on-exec, non-blocking).
    package let descriptor: FileDescriptor

    /// Makes the eventfd. The corresponding C function is `eventfd`.
    package init() throws(Errno) {
        descriptor = FileDescriptor(rawValue: try valueOrErrno { eventfd(0, CInt(EFD_CLOEXEC) | CInt(EFD_NONBLOCK)) }.get())
    }

    /// Adds one to the counter: the eventfd reads ready (an edge, for an edge-triggered
    /// watch). A counter that is saturated, never read after 2^64 - 2 signals, is reset
    /// first, so that this signal still makes an edge.
    package func signal() {
        var one: UInt64 = 1
        let written = withUnsafeBytes(of: &one) { (bytes) -> Result<Int, Errno> in
            Result { () throws(Errno) -> Int in try descriptor.write(bytes) }
        }
        if case .failure(.wouldBlock) = written {
            drain()
            _ = withUnsafeBytes(of: &one) { try? descriptor.write($0) }
        }
    }

    /// Resets the counter to zero: the eventfd no longer reads ready (for a level-triggered
    /// watch, after it reported).
    package func drain() {
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { try? descriptor.read(into: $0) }
    }

    /// Closes the eventfd.
    package func close() {
        try? descriptor.close()
    }
}
