import Glibc

extension FileDescriptor {
    /// Opens the file at `path` with `flags` (`O_RDONLY`, `O_RDWR`, … and `O_CLOEXEC`).
    ///
    /// The corresponding C function is `open`.
    package static func open(_ path: String, flags: CInt) throws(Errno) -> FileDescriptor {
        FileDescriptor(rawValue: try valueOrErrno { Glibc.open(path, flags) }.get())
    }
}
