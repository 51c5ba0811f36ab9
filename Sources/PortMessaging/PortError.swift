import Glibc
@_exported import PermanentThread
import PortKitSystem

/// What can go wrong sending or receiving on a port. Nothing is lost without one of these.
public enum PortError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The receiver stayed full (or the connection stayed unwritable) past the send timeout;
    /// the message was not sent.
    case sendTimedOut
    /// No reply came before the receive timeout (the request was delivered).
    case receiveTimedOut
    /// The port was invalidated; nothing can be sent to or received on it.
    case invalidPort
    /// The peer process died or closed its end (before or while waiting for a reply).
    case peerDied
    /// The message is larger than the limit; it was not sent.
    case messageTooLarge(size: Int, limit: Int)
    /// The message has more components than `Message.maxComponents`; it was not sent.
    case tooManyComponents(count: Int, limit: Int)
    /// The message carries more ports and descriptors (its reply port included) than
    /// `Message.maxDescriptors`; it was not sent.
    case tooManyDescriptors(count: Int, limit: Int)
    /// A descriptor component is not an open descriptor; the message was not sent, and the
    /// port stays usable.
    case invalidDescriptor(CInt)
    /// Ports and descriptors cannot travel over this transport (pipes); use a socket.
    case descriptorsNeedASocket
    /// The peer sent bytes that are not a valid frame; the connection was closed.
    case malformed(String)
    /// The port is not scheduled on a run loop, so nothing would ever receive.
    case notScheduled
    /// The port is scheduled already; a port is scheduled once.
    case alreadyScheduled
    /// The loop the port was to be scheduled on (or to report on) refused: `.loopEnded`
    /// when its thread stopped or no longer takes work. Nothing was scheduled; the port
    /// stays valid and can be scheduled on a loop that runs.
    case loop(ThreadLoopError)
    /// The receiving handler let the request's `PendingReply` go without answering it.
    case noReply
    /// The receiver could not take the ports or descriptors the request carried: its
    /// descriptor table is full (`EMFILE`). The request was not delivered; the connection
    /// stays, and trying again once the receiver has closed some may work.
    case receiverOutOfDescriptors
    /// Another port listens at this address (`ReceivePort.listen(at:)`).
    case addressInUse(String)
    /// Nothing listens at this address (`SendPort.connect(to:)`).
    case noListener(String)
    /// The port listens at an address already; a port listens at one.
    case alreadyListening
    /// What the message carries cannot travel to another host (over TCP): a file
    /// descriptor, a port, or a reply port other than the request's own connection (a
    /// reply to a request travels back on its connection without one). The message was
    /// not sent, and the port stays usable.
    case cannotCrossHosts(String)
    /// Plain TCP was not allowed here: it was not asked for (`TCPSecurity.plainLoopbackOnly`),
    /// or the address is not a loopback one (`127.0.0.0/8`, `::1`); `reason` says which.
    /// Nothing was bound or connected.
    case plainTCPRefused(address: String, reason: String)
    /// Nothing answered at this TCP address within the timeout, the host or its network is
    /// unreachable, or its name did not resolve; `reason` says which. (A host that answers
    /// with a refusal is `noListener`.)
    case unreachable(address: String, reason: String)
    /// A secured TCP connection (`TCPSecurity.secured(by:)`) could not be made: its
    /// handshake failed (this side refused the peer's certificate, or the peer refused
    /// this side's, or presented none), the peer closed the connection instead of
    /// accepting it, or the handshake took longer than the connect timeout; `reason` says
    /// which. Nothing was connected. (A listening port closes such a connection and
    /// goes on serving the others: only the connecting side sees this error.)
    case handshakeFailed(address: String, reason: String)
    /// A system call of the port layer failed (a socket, a bind, a read or write whose
    /// `errno` means nothing more specific).
    case system(SystemCallError)
    /// The task awaiting an async request was cancelled: the wait ended at once, and a reply
    /// that comes later is dropped. The request may have been delivered (and handled).
    case cancelled
    /// The listening port refused the connection: its `PeerRequirement` did not admit this
    /// process (`ReceivePort.requirePeers(_:)`); `reason` says which rule failed. Nothing
    /// sent on the connection was delivered, and it is closed.
    case refusedByPeer(reason: String)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .sendTimedOut: "send timed out: the receiver did not take the message in time"
        case .receiveTimedOut: "receive timed out: no reply in time"
        case .invalidPort: "the port is invalid"
        case .peerDied: "the peer died or closed its end"
        case .messageTooLarge(let size, let limit): "message of \(size) bytes is over the limit of \(limit)"
        case .tooManyComponents(let count, let limit): "message of \(count) components is over the limit of \(limit)"
        case .tooManyDescriptors(let count, let limit):
            "message carrying \(count) ports and descriptors is over the limit of \(limit)"
        case .invalidDescriptor(let fd): "descriptor \(fd) in the message is not open"
        case .descriptorsNeedASocket: "ports and descriptors can only travel over a socket, not a pipe"
        case .malformed(let why): "malformed frame from the peer: \(why)"
        case .notScheduled: "the port is not scheduled on a run loop"
        case .alreadyScheduled: "the port is already scheduled"
        case .loop(let error): "\(error)"
        case .noReply: "the receiver dropped the request without replying"
        case .receiverOutOfDescriptors: "the receiver is out of descriptors and could not take the request's ports"
        case .addressInUse(let address): "another port listens at \(address)"
        case .noListener(let address): "nothing listens at \(address)"
        case .alreadyListening: "the port listens at an address already"
        case .cannotCrossHosts(let what): "\(what) cannot travel to another host"
        case .plainTCPRefused(let address, let reason): "plain TCP to \(address) refused: \(reason)"
        case .unreachable(let address, let reason): "cannot reach \(address): \(reason)"
        case .handshakeFailed(let address, let reason): "secured connection to \(address) refused: \(reason)"
        case .system(let failure): "\(failure)"
        case .cancelled: "the waiting task was cancelled"
        case .refusedByPeer(let reason): "the listening port refused this process: \(reason)"
        }
    }

    /// The failure of the system call `operation` with `errno`.
    public static func system(operation: String, errno: Int32) -> PortError {
        .system(SystemCallError(operation: operation, errno: errno))
    }

    init(_ operation: String, _ errno: Errno) {
        self = .system(SystemCallError(operation, errno))
    }

    /// The error for a failed write or read on a connection.
    init(connection operation: String, _ errno: Errno) {
        switch errno.rawValue {
        case EPIPE, ECONNRESET, ENOTCONN, ECONNREFUSED, ESHUTDOWN: self = .peerDied
        case EBADF: self = .invalidPort
        default: self.init(operation, errno)
        }
    }
}
