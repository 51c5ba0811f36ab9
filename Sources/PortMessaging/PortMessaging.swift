@_exported import PermanentThread

/// The PortMessaging module: ports and messages between threads and processes.
public enum PortMessagingModule {}
