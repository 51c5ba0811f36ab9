import Glibc
import CPortKitSystem

/// A file descriptor: a plain value with no hidden close.
///
/// Ownership is the caller's and visible: whoever made a descriptor closes it, once,
/// with `close()`. Every method is a thin wrapper around one system call, made through
/// `systemCall` (its `EINTR` policy, its fault seam), that throws `Errno` instead of
/// printing or trapping.
package struct FileDescriptor: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The raw descriptor number.
    package var rawValue: CInt

    /// Wraps a raw descriptor number; the caller keeps ownership.
    package init(rawValue: CInt) { self.rawValue = rawValue }

    /// "fd 7".
    package var description: String { "fd \(rawValue)" }

    /// Closes the descriptor. Not retried on `EINTR`: on Linux the descriptor is gone
    /// whatever `close` returns.
    ///
    /// The corresponding C function is `close`.
    package func close() throws(Errno) {
        try nothingOrErrno(on: rawValue, retryOnInterrupt: false) { Glibc.close(rawValue) }.get()
    }

    /// Reads up to `buffer.count` bytes; returns how many were read (0 at end of file).
    ///
    /// The corresponding C function is `read`.
    package func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno(.read, on: rawValue) { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }.get()
    }

    /// Writes up to `buffer.count` bytes; returns how many were written.
    ///
    /// The corresponding C function is `write`.
    package func write(_ buffer: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try systemCall(.write, on: rawValue, count: buffer.count) { Glibc.write(rawValue, buffer.baseAddress, $0) }.get()
    }

    /// Writes up to `buffer.count` bytes without raising SIGPIPE when the reader is gone
    /// (it fails with `EPIPE` instead); returns how many were written. For pipes: a
    /// socket's `send` passes `MSG_NOSIGNAL` itself.
    ///
    /// The corresponding C function is `write`, with SIGPIPE blocked around it.
    package func writeWithoutSignal(_ buffer: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try systemCall(.write, on: rawValue, count: buffer.count) {
            portkit_write_nosigpipe(rawValue, buffer.baseAddress, $0)
        }.get()
    }

    /// Writes all of `buffer`, looping over short writes. A non-blocking descriptor may
    /// still throw `Errno.wouldBlock` part way.
    ///
    /// The corresponding C function is `write`.
    package func writeAll(_ buffer: UnsafeRawBufferPointer) throws(Errno) {
        var offset = 0
        while offset < buffer.count {
            offset += try write(UnsafeRawBufferPointer(rebasing: buffer[offset...]))
        }
    }

    /// Sets or clears `O_NONBLOCK`.
    ///
    /// The corresponding C function is `fcntl`.
    package func setNonBlocking(_ on: Bool = true) throws(Errno) {
        let flags = try valueOrErrno { fcntl(rawValue, F_GETFL) }.get()
        let wanted = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        if wanted != flags {
            try nothingOrErrno { fcntl(rawValue, F_SETFL, wanted) }.get()
        }
    }

    /// Sets or clears `FD_CLOEXEC`.
    ///
    /// The corresponding C function is `fcntl`.
    package func setCloseOnExec(_ on: Bool = true) throws(Errno) {
        let flags = try valueOrErrno { fcntl(rawValue, F_GETFD) }.get()
        let wanted = on ? flags | FD_CLOEXEC : flags & ~FD_CLOEXEC
        if wanted != flags {
            try nothingOrErrno { fcntl(rawValue, F_SETFD, wanted) }.get()
        }
    }

    /// Duplicates the descriptor (close-on-exec set on the copy).
    ///
    /// The corresponding C function is `fcntl` with `F_DUPFD_CLOEXEC`.
    package func duplicate(atLeast minimum: CInt = 0) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { fcntl(rawValue, F_DUPFD_CLOEXEC, minimum) }.get())
    }

    /// Makes a pipe; both ends close-on-exec. Returns (read end, write end).
    ///
    /// The corresponding C function is `pipe2`.
    package static func pipe(nonBlocking: Bool = false) throws(Errno) -> (read: FileDescriptor, write: FileDescriptor) {
        var fds: (CInt, CInt) = (-1, -1)
        let flags = O_CLOEXEC | (nonBlocking ? O_NONBLOCK : 0)
        try withUnsafeMutableBytes(of: &fds) { raw throws(Errno) in
            let p = raw.baseAddress!.assumingMemoryBound(to: CInt.self)
            try nothingOrErrno(.pipe) { portkit_pipe2(p, flags) }.get()
        }
        return (FileDescriptor(rawValue: fds.0), FileDescriptor(rawValue: fds.1))
    }

    /// Closes each of `descriptors` (raw numbers this process owns), as `close()` does.
    package static func close(_ descriptors: some Sequence<CInt>) {
        for raw in descriptors { try? FileDescriptor(rawValue: raw).close() }
    }

    /// Whether the number names an open descriptor: a probe that expects to find closed
    /// ones, so a closed one is not counted in `SystemCallAudit`.
    ///
    /// The corresponding C function is `fcntl` with `F_GETFD`.
    package var isOpen: Bool {
        fcntl(rawValue, F_GETFD) != -1
    }
}
