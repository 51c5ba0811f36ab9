/// Something a name server did that an operator may want to see: a client refused and
/// why, a name registered or released, a limit reached.
///
/// A server started with an event handler (`NameServer.start(at:policy:events:)`) calls it
/// on the server's own thread, once per event, as it happens; the handler should be quick
/// (write a line, bump a counter). `portnamed` prints one line per event to its standard
/// error, filtered by `--log-level`.
///
/// New cases may be added in a minor release: `switch` over it with a `default:`.
public enum NameServerEvent: Hashable, Sendable, CustomStringConvertible {
    /// A client connected.
    case connectionOpened(pid: Int32, uid: UInt32)
    /// A client's connection ended (it closed it, exited or was killed).
    case connectionClosed(pid: Int32, uid: UInt32)
    /// The server closed a client's connection: over the connection limit, a broken
    /// protocol, or output it would not read. `reason` says which.
    case connectionRefused(pid: Int32, uid: UInt32, reason: String)
    /// The server refused a request: permission denied, a limit reached, a name taken, an
    /// invalid name, a malformed request. Not found and timed out are answers, not refusals.
    case requestRefused(pid: Int32, uid: UInt32, error: NameServerError)
    /// A name was registered.
    case nameRegistered(NameOwner)
    /// A name was released: unregistered, or its owner's connection ended.
    case nameReleased(NameOwner)
    /// A lookup of an absent activatable name started its service: process `pid`.
    case serviceStarted(name: String, pid: Int32)
    /// An activatable name's service did not register it; its lookups were answered
    /// `activationFailed`.
    case serviceFailed(name: String, reason: NameActivationFailure)

    /// How much an operator needs to see it, for filtering.
    public enum Severity: Int, Hashable, Sendable, Comparable, CaseIterable, CustomStringConvertible {
        /// A client was refused or a limit reached.
        case warning = 4
        /// A request was refused in the normal course (a name taken, an invalid name).
        case notice = 5
        /// A name came or went.
        case info = 6
        /// A connection came or went.
        case debug = 7

        /// The syslog priority (`<4>` … `<7>` at the start of a journal line).
        public var syslogPriority: Int { rawValue }

        /// `warning`, `notice`, `info` or `debug`.
        public var description: String {
            switch self {
            case .warning: return "warning"
            case .notice: return "notice"
            case .info: return "info"
            case .debug: return "debug"
            }
        }

        /// Orders by importance: `warning` is the least verbose level.
        public static func < (lhs: Severity, rhs: Severity) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    /// How much an operator needs to see this event.
    public var severity: Severity {
        switch self {
        case .connectionOpened, .connectionClosed: return .debug
        case .connectionRefused: return .warning
        case .requestRefused(_, _, let error):
            switch error {
            case .permissionDenied, .limitExceeded, .protocolError: return .warning
            default: return .notice
            }
        case .nameRegistered, .nameReleased, .serviceStarted: return .info
        case .serviceFailed: return .warning
        }
    }

    /// One line, starting with what happened, then who.
    public var description: String {
        switch self {
        case .connectionOpened(let pid, let uid):
            return "connection opened: pid \(pid) uid \(uid)"
        case .connectionClosed(let pid, let uid):
            return "connection closed: pid \(pid) uid \(uid)"
        case .connectionRefused(let pid, let uid, let reason):
            return "client refused: pid \(pid) uid \(uid): \(reason)"
        case .requestRefused(let pid, let uid, let error):
            return "request refused: pid \(pid) uid \(uid): \(error)"
        case .nameRegistered(let owner):
            return "name registered: \(NameRules.printable(owner.name)) pid \(owner.pid) uid \(owner.uid)"
        case .nameReleased(let owner):
            return "name released: \(NameRules.printable(owner.name)) pid \(owner.pid) uid \(owner.uid)"
        case .serviceStarted(let name, let pid):
            return "service started: \(NameRules.printable(name)) pid \(pid)"
        case .serviceFailed(let name, let reason):
            return "service failed: \(NameRules.printable(name)): \(reason)"
        }
    }
}

/// What a name server calls with each `NameServerEvent`, on the server's thread.
public typealias NameServerEventHandler = @Sendable (NameServerEvent) -> Void
