import PortMessaging

/// How the start of an activatable name's service failed
/// (`NameServerError.activationFailed(name:reason:)`).
public enum NameActivationFailure: Hashable, Sendable, CustomStringConvertible {
    /// The service exited with `status` before it registered the name (for a
    /// `SystemdUnit=` service: `systemctl start` failed with that status).
    case exited(status: Int32)
    /// A signal ended the service before it registered the name.
    case signalled(signal: Int32)
    /// The service did not register the name within its service file's `TimeoutSec=`; the
    /// server sent it SIGTERM.
    case timedOut(after: Duration)
    /// The service could not be started at all: `reason` says why (its executable missing,
    /// its service file unreadable).
    case couldNotStart(reason: String)

    /// A few words: "exited with status 3 before registering", ….
    public var description: String {
        switch self {
        case .exited(let status): return "exited with status \(status) before registering"
        case .signalled(let signal): return "killed by signal \(signal) before registering"
        case .timedOut(let after): return "did not register within \(after)"
        case .couldNotStart(let reason): return "could not start: \(reason)"
        }
    }

    /// The reply fields after the name: how (0 exited, 1 signalled, 2 timed out, 3 could
    /// not start), the value (status, signal or milliseconds), the detail.
    var fields: [MessageComponent] {
        let (how, value, detail): (UInt64, UInt64, String) = switch self {
        case .exited(let status): (0, UInt64(UInt32(bitPattern: status)), "")
        case .signalled(let signal): (1, UInt64(UInt32(bitPattern: signal)), "")
        case .timedOut(let after): (2, UInt64(clamping: after.components.seconds * 1000 + after.components.attoseconds / 1_000_000_000_000_000), "")
        case .couldNotStart(let reason): (3, 0, reason)
        }
        return [NameField.integer(how), NameField.integer(value), NameField.string(detail)]
    }

    /// Reads `fields` as `fields` wrote them.
    init(_ fields: inout NameFieldReader) throws(NameServerError) {
        let how = try fields.integer()
        let value = try fields.integer()
        let detail = try fields.string()
        switch how {
        case 0: self = .exited(status: Int32(bitPattern: UInt32(truncatingIfNeeded: value)))
        case 1: self = .signalled(signal: Int32(bitPattern: UInt32(truncatingIfNeeded: value)))
        case 2: self = .timedOut(after: .milliseconds(Int64(clamping: value)))
        default: self = .couldNotStart(reason: detail)
        }
    }
}
