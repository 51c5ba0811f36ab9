import PermanentThread
import PortMessaging
import PortKitSystem

/// What a `ClusterGateway` allows a caller before and after its open request, so that
/// neither a stranger nor a member can make it hold memory or descriptors for nothing.
///
/// - The first message of a connection is held to `maxOpenRequestBytes`: a larger one is
///   refused at its header (its body never buffered) and the connection closed.
/// - A connection that has not opened a name within `openTimeout`, or has begun a message
///   and not finished it within `requestTimeout`, is closed; so is an opened one silent
///   for `idleTimeout`, if set, with no request of its waiting for the owner's answer.
/// - At most `maxConnections` connections at once, further ones closed as they come; and
///   never more than half the process's descriptor limit (`RLIMIT_NOFILE`) together with
///   the handshakes under way, so that a name server in the same process keeps the other
///   half for its own clients.
public struct GatewayLimits: Hashable, Sendable {
    /// The largest open request (its name's bytes): 1 KiB, room for any valid name.
    public static let maxOpenRequestBytes = 1024

    /// The most callers' connections at once (1024 by default), before the descriptor
    /// bound (`effectiveMaxConnections`).
    public var maxConnections: Int
    /// How long a connection may take to open a name once accepted (10 s by default).
    public var openTimeout: Duration
    /// How long a message may take to arrive once its first byte has (30 s by default).
    public var requestTimeout: Duration
    /// How long an opened connection may stay silent, with no request waiting for the
    /// owner, before the gateway closes it; `nil` (the default) never closes it, because a
    /// node's relay keeps one connection per name for as long as it is used.
    public var idleTimeout: Duration?

    /// Makes limits; every argument has the default described on its property.
    public init(
        maxConnections: Int = 1024, openTimeout: Duration = .seconds(10), requestTimeout: Duration = .seconds(30),
        idleTimeout: Duration? = nil
    ) {
        self.maxConnections = maxConnections
        self.openTimeout = openTimeout
        self.requestTimeout = requestTimeout
        self.idleTimeout = idleTimeout
    }

    /// The connection cap kept: `maxConnections`, or less where the process's descriptor
    /// limit says so (half of it, less the handshakes a secured listener may run).
    public var effectiveMaxConnections: Int {
        let limit = FileSystem.descriptorLimit
        guard limit < Int.max / 2 else { return max(1, maxConnections) }
        return max(1, min(maxConnections, limit / 2 - ReceivePort.maxPendingHandshakes))
    }

    /// The time-outs, as the listening port's peers keep them.
    var timeouts: PeerTimeouts.Limits {
        PeerTimeouts.Limits(greeting: openTimeout, greetingName: "open a name", request: requestTimeout, idle: idleTimeout)
    }
}
