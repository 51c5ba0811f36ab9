import Glibc

/// A POSIX error number, as returned by a failed system call.
///
/// The System layer never prints or traps on a failed call: it returns or throws
/// one of these, and the layers above turn it into their own typed errors.
package struct Errno: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The raw `errno` value.
    package var rawValue: CInt

    /// Wraps a raw `errno` value.
    package init(rawValue: CInt) { self.rawValue = rawValue }

    /// The calling thread's current `errno`.
    package static var current: Errno { Errno(rawValue: errno) }

    /// `strerror`'s text followed by the symbolic value, e.g. "Broken pipe (errno 32)".
    package var description: String {
        String(cString: strerror(rawValue)) + " (errno \(rawValue))"
    }

    package static let interrupted = Errno(rawValue: EINTR)
    package static let wouldBlock = Errno(rawValue: EAGAIN)
    package static let brokenPipe = Errno(rawValue: EPIPE)
    package static let badFileDescriptor = Errno(rawValue: EBADF)
    package static let connectionReset = Errno(rawValue: ECONNRESET)
    package static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    package static let noSuchFile = Errno(rawValue: ENOENT)
    package static let alreadyExists = Errno(rawValue: EEXIST)
    package static let addressInUse = Errno(rawValue: EADDRINUSE)
    package static let invalidArgument = Errno(rawValue: EINVAL)
    package static let messageTooLong = Errno(rawValue: EMSGSIZE)
    package static let notImplemented = Errno(rawValue: ENOSYS)
    package static let permissionDenied = Errno(rawValue: EACCES)
}
