import PortKitSystem

/// A system call that failed: which one, and the `errno` it set.
///
/// Every public error type that can end in a failed system call carries this one value in
/// its `system` case (`ThreadLoopError.system`, `PermanentThreadError.system`,
/// `PortError.system`, `NameServerError.system`), so the operation and its `errno` are
/// described in one place and matched the same way in each.
public struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The call, or the step that made it (`"bind"`, `"poller create"`).
    public var operation: String
    /// The `errno` it failed with (`EACCES`, `EMFILE`, ...).
    public var errno: CInt

    /// The failure of `operation` with `errno`.
    public init(operation: String, errno: CInt) {
        self.operation = operation
        self.errno = errno
    }

    package init(_ operation: String, _ errno: Errno) {
        self.init(operation: operation, errno: errno.rawValue)
    }

    /// "OPERATION failed: ERRNO (its text)".
    public var description: String { "\(operation) failed: \(Errno(rawValue: errno))" }
}
