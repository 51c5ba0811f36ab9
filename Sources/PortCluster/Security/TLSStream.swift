import COpenSSL
import Glibc
import PermanentThread
import PortMessaging
import PortKitLocks

/// One connection's TLS over a non-blocking TCP socket (a `SecuredStream`): OpenSSL's
/// `SSL`, reached through a socket BIO that never raises SIGPIPE.
///
/// The port's loop reads while a sender's thread writes: every OpenSSL call on the `SSL`
/// is made holding `state`'s lock, which is held for that one non-blocking call only.
final class TLSStream: SecuredStream, @unchecked Sendable {
    // @unchecked: `ssl` is used only inside `state.withLock` (one call at a time, and
    // OpenSSL's error queue read on the same thread before the lock is let go); `context`
    // is immutable and shareable.
    private let ssl: OpaquePointer
    private let context: TLSContext
    /// A pthread mutex (`Locked`), which ThreadSanitizer follows into OpenSSL's calls.
    private let state = Locked(State())

    /// What the stream keeps between calls.
    private struct State {
        /// The plaintext of a write OpenSSL could not finish, whose last byte the caller
        /// was told is still to go: the next write finishes it with these very bytes (as
        /// OpenSSL requires) and reports that byte.
        var unfinished: [UInt8]?
        /// The peer's certificate's common name, once the handshake is complete.
        var identity: String?
    }

    /// The most plaintext one write hands OpenSSL: one record's, so that a write it could
    /// not finish holds that record only.
    private static let writeChunk = 16 * 1024
    /// The least room a read is made with: one record's plaintext, so none stays inside.
    private static let recordRoom = 16 * 1024

    /// A stream over `socket` in `role`, from `context`.
    /// - Throws: `PortError.handshakeFailed` (its address empty: the port names it) when
    ///   OpenSSL cannot make the connection's state.
    init(context: TLSContext, socket: Int32, role: StreamRole) throws(PortError) {
        ERR_clear_error()
        guard let ssl = SSL_new(context.context) else {
            throw .handshakeFailed(address: "", reason: OpenSSLSupport.drainErrors(or: "SSL_new failed"))
        }
        guard let method = OpenSSLSupport.socketMethod, let bio = portkit_bio_new(method, socket) else {
            SSL_free(ssl)
            throw .handshakeFailed(address: "", reason: OpenSSLSupport.drainErrors(or: "BIO_new failed"))
        }
        SSL_set_bio(ssl, bio, bio)  // one reference, both ways: the SSL frees it
        switch role {
        case .connecting(let host):
            SSL_set_connect_state(ssl)
            if !Self.isNumericAddress(host) { _ = portkit_ssl_set_host_name(ssl, host) }
        case .accepting:
            SSL_set_accept_state(ssl)
        }
        self.ssl = ssl
        self.context = context
    }

    deinit { SSL_free(ssl) }

    var peerIdentity: String? { state.withLock { $0.identity } }

    func handshake() -> HandshakeStep {
        state.withLock { state -> HandshakeStep in
            ERR_clear_error()
            let result = SSL_do_handshake(ssl)
            if result == 1 {
                guard SSL_get_verify_result(ssl) == X509_V_OK, let certificate = SSL_get0_peer_certificate(ssl) else {
                    return .failed(reason: "the peer presented no verified certificate")
                }
                state.identity = OpenSSLSupport.commonName(of: certificate)
                return .complete
            }
            let code = SSL_get_error(ssl, result)
            let savedErrno = errno
            switch code {
            case SSL_ERROR_WANT_READ: return .wantsReadable
            case SSL_ERROR_WANT_WRITE: return .wantsWritable
            default: return .failed(reason: handshakeFailure(code, errno: savedErrno))
            }
        }
    }

    /// Why the handshake failed: the verification's verdict on the peer's certificate if
    /// it refused it, else OpenSSL's reasons (a refusal by the peer arrives as its alert).
    private func handshakeFailure(_ code: CInt, errno savedErrno: CInt) -> String {
        let verdict = SSL_get_verify_result(ssl)
        if verdict != X509_V_OK {
            ERR_clear_error()
            return "the peer's certificate was refused: " + String(cString: X509_verify_cert_error_string(verdict))
        }
        if code == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 {
            return savedErrno == 0 ? "the peer closed the connection during the handshake" : String(cString: strerror(savedErrno))
        }
        return OpenSSLSupport.drainErrors(or: "handshake failed (SSL error \(code))")
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> StreamTransfer {
        guard let base = buffer.baseAddress else { return .wouldBlock }
        return state.withLock { _ -> StreamTransfer in
            var total = 0
            // Record by record until OpenSSL wants more from the socket: each read has a
            // whole record's room, so nothing decrypted stays inside OpenSSL, where the
            // socket's readiness would not announce it. Short of that room, stop: the
            // socket still holds the rest and stays readable.
            while buffer.count - total >= Self.recordRoom {
                ERR_clear_error()
                let room = CInt(clamping: buffer.count - total)
                let result = SSL_read(ssl, base + total, room)
                if result > 0 {
                    total += Int(result)
                    continue
                }
                let ending = Self.ending(SSL_get_error(ssl, result), errno: errno)
                // The bytes before the peer's end still count (the end stays readable on
                // the socket); a broken stream loses them, as the connection ends at once.
                switch ending {
                case .wouldBlock, .closed: return total > 0 ? .transferred(total) : ending
                case .failed, .transferred: return ending
                }
            }
            return total > 0 ? .transferred(total) : .wouldBlock
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> StreamTransfer {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return .wouldBlock }
        return state.withLock { state -> StreamTransfer in
            if var unfinished = state.unfinished {
                // The caller's bytes begin with the byte kept back; OpenSSL retries the
                // write it began with the same plaintext (the buffer may move).
                while !unfinished.isEmpty {
                    ERR_clear_error()
                    let result = unfinished.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, CInt($0.count)) }
                    if result > 0 {
                        unfinished.removeFirst(Int(result))
                        continue
                    }
                    let code = SSL_get_error(ssl, result)
                    let savedErrno = errno
                    state.unfinished = unfinished
                    return Self.ending(code, errno: savedErrno)
                }
                state.unfinished = nil
                return .transferred(1)
            }
            let chunk = min(bytes.count, Self.writeChunk)
            ERR_clear_error()
            let result = SSL_write(ssl, base, CInt(chunk))
            if result > 0 { return .transferred(Int(result)) }
            let code = SSL_get_error(ssl, result)
            let savedErrno = errno
            guard code == SSL_ERROR_WANT_WRITE || code == SSL_ERROR_WANT_READ, chunk > 1 else {
                return Self.ending(code, errno: savedErrno)
            }
            // OpenSSL may have made the record already: it must be finished with these
            // bytes, whatever the caller does next. Reporting all but the last as taken
            // makes the caller come back with the rest, which finishes it.
            state.unfinished = Array(UnsafeRawBufferPointer(rebasing: bytes[..<chunk]))
            return .transferred(chunk - 1)
        }
    }

    /// A read's or write's outcome when OpenSSL moved no bytes (its error queue is
    /// emptied).
    private static func ending(_ code: CInt, errno savedErrno: CInt) -> StreamTransfer {
        switch code {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .wouldBlock
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        case SSL_ERROR_SYSCALL where ERR_peek_error() == 0:
            if savedErrno == 0 { return .closed }
            return .failed(errno: savedErrno, reason: String(cString: strerror(savedErrno)))
        default:
            return .failed(errno: EPROTO, reason: OpenSSLSupport.drainErrors(or: "TLS failure (SSL error \(code))"))
        }
    }

    /// Whether `host` is a numeric IPv4 or IPv6 address (no server name to send for it).
    private static func isNumericAddress(_ host: String) -> Bool {
        var address = in6_addr()
        return inet_pton(AF_INET, host, &address) == 1 || inet_pton(AF_INET6, host, &address) == 1
    }
}
