/// What secures a port's TCP connections (`TCPSecurity.secured(by:)`): it turns a connected
/// socket into a `SecuredStream`, whose handshake the port then drives.
///
/// PortMessaging knows nothing of the protocol: the cluster layer's TLS is one
/// implementation. The security is asked once per connection, on the connecting thread
/// or on the listening port's loop, and must not block: every call on the stream it makes
/// is non-blocking, and the port waits for the socket's readiness between them.
public protocol StreamSecurity: Sendable {
    /// Makes the stream that secures `socket`, its handshake not begun.
    /// - Parameters:
    ///   - socket: a connected, non-blocking TCP socket. It stays the port's: the stream
    ///     reads and writes it, and never closes it.
    ///   - role: which side of the connection this is.
    /// - Throws: `PortError.handshakeFailed` (say, the security's context is unusable).
    func secure(socket: Int32, as role: StreamRole) throws(PortError) -> any SecuredStream
}

/// Which side of a connection a stream secures.
public enum StreamRole: Sendable, Hashable {
    /// The side that connected, to `host` (as the caller of `SendPort.connect` named it).
    case connecting(host: String)
    /// The side that accepted the connection at a listening port.
    case accepting
}

/// One connection's secured byte stream over a non-blocking socket: a handshake, then
/// plaintext both ways. Every call returns at once.
///
/// The reading thread and a writing thread may call at the same time (a connection's
/// writer runs on the sender's thread while the port's loop reads), so an implementation
/// serialises its own state. Readiness is watched on the socket itself, level-triggered:
/// a read must hand over every byte it decrypted, leaving nothing buffered inside the
/// stream that the socket's readiness would not announce.
public protocol SecuredStream: AnyObject, Sendable {
    /// One step of the handshake; called again when the socket is ready as asked, until
    /// it is `.complete` or `.failed`.
    func handshake() -> HandshakeStep

    /// Reads plaintext into `buffer`, which has room for at least 16 KiB (a TLS record's
    /// plaintext fits whole): what is available, stopping early rather than leave part of
    /// a record decrypted and unread (see the type's note on buffering).
    /// - Parameter buffer: where the plaintext goes.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamTransfer

    /// Writes a prefix of `bytes`: `.transferred(count)` for the bytes the stream took,
    /// which it delivers in full, without another call, unless it keeps back the last byte
    /// of what it took: a stream that must finish a write later reports one byte fewer,
    /// so that the caller calls again with the rest. `.wouldBlock` when it took none.
    /// - Parameter bytes: the plaintext to send, never empty.
    func write(_ bytes: UnsafeRawBufferPointer) -> StreamTransfer

    /// The verified identity of the peer, once the handshake is complete (for a
    /// certificate, its subject's common name); `nil` before, or when it has none.
    var peerIdentity: String? { get }
}

/// Where a handshake stands after one step.
public enum HandshakeStep: Sendable, Hashable {
    /// Done: plaintext may flow, and the peer is verified.
    case complete
    /// Call again once the socket is readable.
    case wantsReadable
    /// Call again once the socket is writable.
    case wantsWritable
    /// The handshake failed (the peer's certificate refused, the peer refused this side's,
    /// the connection closed midway); `reason` says why.
    case failed(reason: String)
}

/// What one read or write of a secured stream came to.
public enum StreamTransfer: Sendable, Hashable {
    /// This many bytes were read or taken (never 0).
    case transferred(Int)
    /// Nothing now: try again once the socket is ready (readable for a read, writable for
    /// a write).
    case wouldBlock
    /// The peer ended the stream.
    case closed
    /// The stream broke: `errno` is the system's (`ECONNRESET`, say), or `EPROTO` for a
    /// protocol failure; `reason` says what happened.
    case failed(errno: Int32, reason: String)
}
