import Glibc

/// Who may use a name server, and how much each connection may hold.
///
/// The defaults fit one user's programs: only the server's own user may register, look
/// up, list or watch; the socket file is `0600` in a `0700` directory.
public struct NameServerPolicy: Hashable, Sendable {
    /// The users (SO_PEERCRED uid) allowed to use the server; `nil` lets every user in.
    /// By default, only the user the server runs as. Others get `permissionDenied`.
    public var allowedUsers: Set<UInt32>?
    /// The most names one connection may hold.
    public var maxNamesPerConnection: Int
    /// The most watches one connection may have open.
    public var maxWatchesPerConnection: Int
    /// The most lookups one connection may have waiting for a name.
    public var maxWaitingLookupsPerConnection: Int
    /// The most client connections at once; the server turns further ones away at once
    /// (`serverBusy`). Users the policy refuses are turned away before they count.
    public var maxConnections: Int
    /// The most bytes the server keeps queued for a client that does not read (watch
    /// events, replies); past it the client is disconnected rather than buffered for ever.
    public var maxQueuedBytesPerConnection: Int
    /// The permission bits of the socket file the server binds; `0o600` by default. Other
    /// users need the directory's search bit as well to reach it.
    public var socketPermissions: UInt32
    /// How long a new connection may take to say hello (10 s by default); past it the
    /// server closes it. A connection that never speaks holds a descriptor for nothing.
    public var helloTimeout: Duration
    /// How long a request may take to arrive once its first byte has (30 s by default);
    /// past it the server closes the connection, and the bytes it kept go with it.
    public var requestTimeout: Duration
    /// How long a connection that holds nothing (no name, watch or waiting lookup) may stay
    /// silent before the server closes it; `nil` (the default) never closes it, because a
    /// `NameServerClient` keeps its connection between calls and does not reconnect.
    public var idleTimeout: Duration?
    /// The directories of service files that make names activatable, searched in order
    /// (`ServiceDirectory`); empty (the default for an embedded server) activates nothing.
    /// `portnamed` uses `ServiceDirectory.defaultDirectories` unless given `--service-dir`.
    public var serviceDirectories: [String] = []

    /// Makes a policy; every argument has the default described on its property.
    public init(
        allowedUsers: Set<UInt32>? = [UInt32(getuid())],
        maxNamesPerConnection: Int = 256,
        maxWatchesPerConnection: Int = 64,
        maxWaitingLookupsPerConnection: Int = 64,
        maxConnections: Int = 4096,
        maxQueuedBytesPerConnection: Int = 4 * 1024 * 1024,
        socketPermissions: UInt32 = 0o600,
        helloTimeout: Duration = .seconds(10),
        requestTimeout: Duration = .seconds(30),
        idleTimeout: Duration? = nil
    ) {
        self.allowedUsers = allowedUsers
        self.maxNamesPerConnection = maxNamesPerConnection
        self.maxWatchesPerConnection = maxWatchesPerConnection
        self.maxWaitingLookupsPerConnection = maxWaitingLookupsPerConnection
        self.maxConnections = maxConnections
        self.maxQueuedBytesPerConnection = maxQueuedBytesPerConnection
        self.socketPermissions = socketPermissions
        self.helloTimeout = helloTimeout
        self.requestTimeout = requestTimeout
        self.idleTimeout = idleTimeout
    }

    /// Whether `uid` may use the server.
    func admits(_ uid: UInt32) -> Bool { allowedUsers?.contains(uid) ?? true }
}
