@_exported import PortMessaging

/// The NamedPortServer module: names for ports, across threads and processes.
public enum NamedPortServerModule {
    /// PortKit's version, as `portnamed --version` and `portname --version` print it.
    public static let version = "0.1.0"
}
