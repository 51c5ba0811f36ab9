import Glibc
import PermanentThread

/// The service manager's notify protocol (`Type=notify` in a systemd unit), spoken by
/// hand: each state is one datagram of `KEY=VALUE` lines sent to the Unix socket named by
/// `$NOTIFY_SOCKET`. A name starting with `@` is in the abstract namespace. Without the
/// variable every call does nothing.
struct ServiceNotifier {
    /// The socket address's bytes (a leading `@` already turned into a NUL), or `nil`.
    private let path: [UInt8]?

    init() {
        guard let value = getenv("NOTIFY_SOCKET"), value[0] != 0 else {
            path = nil
            return
        }
        var bytes = Array(String(cString: value).utf8)
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        // sun_path holds 108 bytes, and a path (not an abstract name) needs its NUL.
        path = bytes.count < 108 ? bytes : nil
    }

    /// Whether a service manager asked to be told.
    var isActive: Bool { path != nil }

    /// Tells the service manager the daemon accepts connections; a failure's errno.
    @discardableResult
    func ready(status: String) -> Int32? { send("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())") }

    /// Tells the service manager the daemon is stopping; a failure's errno.
    @discardableResult
    func stopping() -> Int32? { send("STOPPING=1\nSTATUS=stopping") }

    /// Sends one datagram; a failure is returned as the errno, for the log.
    @discardableResult
    func send(_ state: String) -> Int32? {
        guard let path else { return nil }
        return DatagramSocket.send(Array(state.utf8), to: path)?.rawValue
    }
}
