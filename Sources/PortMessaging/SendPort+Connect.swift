import Glibc
import PermanentThread
import PortKitSystem

extension SendPort {
    /// A send port connected to the port listening at `address`, in this process or any
    /// other (CFMessagePortCreateRemote).
    /// - Parameters:
    ///   - address: where the port listens.
    ///   - timeout: how long to wait while the listener's backlog is full.
    /// - Throws: `.noListener` (nothing listens there), `.sendTimedOut`, `.system`;
    ///   `.plainTCPRefused` for a TCP address (use `connect(to:security:timeout:)`).
    public static func connect(to address: PortAddress, timeout: Duration = .seconds(10)) throws(PortError) -> SendPort {
        if case .tcp = address { throw .plainTCPRefused(address: address.description, reason: TCPSecurity.notAskedFor) }
        let socket: FileDescriptor
        do { socket = try UnixSocket.make(nonBlocking: false) } catch { throw PortError("socket", error) }
        do throws(Errno) {
            try UnixSocket.setSendTimeout(socket, timeout)
            try UnixSocket.connect(socket, to: address.name, abstract: address.isAbstract)
        } catch {
            try? socket.close()
            switch error.rawValue {
            case ENOENT, ECONNREFUSED: throw .noListener(address.description)
            case EAGAIN, EINPROGRESS: throw .sendTimedOut
            default: throw PortError("connect \(address)", error)
            }
        }
        // Left blocking: the requester's waiting reads need it so, and nothing else waits.
        return SendPort(connection: Connection(.socket(socket), blockingSocket: true))
    }
}
