import Glibc
import PermanentThread
import PortKitSystem

/// The service manager's notify protocol (`Type=notify` in a systemd unit), spoken by
/// hand: each state is one datagram of `KEY=VALUE` lines sent to the Unix socket named by
/// `$NOTIFY_SOCKET`. A name starting with `@` is in the abstract namespace. Without the
/// variable every call does nothing.
struct ServiceNotifier {
    /// The socket's path or abstract name, or `nil`.
    private let target: (path: String, abstract: Bool)?

    init() {
        guard let value = getenv("NOTIFY_SOCKET"), value[0] != 0 else {
            target = nil
            return
        }
        let text = String(cString: value)
        // sun_path holds 108 bytes: a path needs its NUL, an abstract name its leading one.
        guard text.utf8.count < 108 else {
            target = nil
            return
        }
        target = text.hasPrefix("@") ? (String(text.dropFirst()), true) : (text, false)
    }

    /// Whether a service manager asked to be told.
    var isActive: Bool { target != nil }

    /// Tells the service manager the daemon accepts connections; a failure's errno.
    @discardableResult
    func ready(status: String) -> Int32? { send("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())") }

    /// Tells the service manager the daemon is stopping; a failure's errno.
    @discardableResult
    func stopping() -> Int32? { send("STOPPING=1\nSTATUS=stopping") }

    /// Sends one datagram; a failure is returned as the errno, for the log.
    @discardableResult
    func send(_ state: String) -> Int32? {
        guard let target else { return nil }
        do throws(Errno) {
            try UnixSocket.sendDatagram(Array(state.utf8), to: target.path, abstract: target.abstract)
            return nil
        } catch {
            return error.rawValue
        }
    }
}
