import COpenSSL
import Glibc
import PermanentThread
import PortKitTestSupport
import PortKitSystem

/// A TLS client made with OpenSSL directly, for what `ClusterTLS` never does: connecting
/// without a certificate. It speaks no PortKit frames; it only says how the server's
/// verdict reads.
enum RawTLSClient {
    /// How the exchange ended.
    enum Outcome: Equatable {
        /// The handshake failed on this side; OpenSSL's reason.
        case handshakeFailed(String)
        /// The handshake completed here, then the first read failed with OpenSSL's reason
        /// (a server's refusal arrives as its alert).
        case refusedAfterHandshake(String)
        /// The first read brought bytes: the server accepted the connection.
        case accepted
        /// The server closed without a word.
        case closed
    }

    /// Connects to 127.0.0.1:`port` presenting no certificate, trusting `authority`, and
    /// reads the server's first record (waiting up to a minute).
    static func connectWithoutCertificate(port: UInt16, authority: String) throws -> Outcome {
        let address = try requireAddress(port)
        let socket = try TCPSocket.connect(to: address, deadline: .now + .seconds(60))
        defer { try? socket.close() }
        try socket.setNonBlocking(false)
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(socket.rawValue, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard let context = SSL_CTX_new(TLS_method()) else { return .handshakeFailed("SSL_CTX_new") }
        defer { SSL_CTX_free(context) }
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        SSL_CTX_load_verify_locations(context, authority, nil)
        guard let ssl = SSL_new(context) else { return .handshakeFailed("SSL_new") }
        defer { SSL_free(ssl) }
        SSL_set_fd(ssl, socket.rawValue)
        ERR_clear_error()
        if SSL_connect(ssl) != 1 { return .handshakeFailed(reasons()) }
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        ERR_clear_error()
        let got = SSL_read(ssl, &buffer, CInt(buffer.count))
        if got > 0 { return .accepted }
        let code = SSL_get_error(ssl, got)
        if code == SSL_ERROR_ZERO_RETURN || (code == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) { return .closed }
        return .refusedAfterHandshake(reasons())
    }

    private static func requireAddress(_ port: UInt16) throws -> TCPSocket.Address {
        guard let address = try TCPSocket.resolve("127.0.0.1", port: port).first else {
            throw SpawnedProcess.Failure(description: "127.0.0.1 resolves to no address")
        }
        return address
    }

    /// OpenSSL's reasons in this thread's queue, joined.
    private static func reasons() -> String {
        var all: [String] = []
        while case let code = ERR_get_error(), code != 0 {
            all.append(ERR_reason_error_string(code).map { String(cString: $0) } ?? "error \(code)")
        }
        return all.joined(separator: "; ")
    }
}
