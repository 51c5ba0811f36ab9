@_exported import PortMessaging

/// The NamedPortServer module: names for ports, across threads and processes.
public enum NamedPortServerModule {}
