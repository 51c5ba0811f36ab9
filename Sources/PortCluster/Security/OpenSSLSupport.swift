import COpenSSL
import Glibc
import PermanentThread
import PortKitSystem

/// What the cluster layer's TLS shares with OpenSSL: its error queue read as text, the
/// socket BIO method, and a certificate's common name.
enum OpenSSLSupport {
    /// The reasons in this thread's OpenSSL error queue, oldest first, joined; the queue
    /// is emptied. `fallback` when it held none.
    static func drainErrors(or fallback: String) -> String {
        var reasons: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            if let reason = ERR_reason_error_string(code) {
                reasons.append(String(cString: reason))
            } else {
                var text = [CChar](repeating: 0, count: 256)
                ERR_error_string_n(code, &text, text.count)
                reasons.append(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
        }
        return reasons.isEmpty ? fallback : reasons.joined(separator: "; ")
    }

    /// The socket BIO method, made once for the process: its writes and reads are the
    /// System layer's `send` (`MSG_NOSIGNAL`: a peer gone is `EPIPE`, never SIGPIPE) and
    /// `recv`, never blocking, through the `EINTR` policy and the fault seam.
    static var socketMethod: OpaquePointer? { methodBox.method }

    /// The BIO method, in a box Swift may share between threads.
    private struct MethodBox: @unchecked Sendable {
        // @unchecked: the method is made once, before any use, and never changed or freed
        // afterwards; OpenSSL only reads it.
        let method: OpaquePointer?
    }

    private static let methodBox = MethodBox(
        method: portkit_bio_method_make(
            { bio, bytes, length in socketWrite(bio, bytes, length) }, { bio, bytes, length in socketRead(bio, bytes, length) }))

    /// A socket BIO's write: would-block marks the BIO to retry; another failure leaves its
    /// error in `errno`, where the TLS stream reads it.
    private static func socketWrite(_ bio: OpaquePointer?, _ bytes: UnsafePointer<CChar>?, _ length: CInt) -> CInt {
        portkit_bio_clear_retry(bio)
        let socket = FileDescriptor(rawValue: portkit_bio_fd(bio))
        do {
            return CInt(try socket.send(UnsafeRawBufferPointer(start: bytes, count: Int(length))))
        } catch {
            if error == .wouldBlock { portkit_bio_set_retry_write(bio) }
            errno = error.rawValue
            return -1
        }
    }

    /// A socket BIO's read: 0 at the peer's end of the stream; would-block marks the BIO to
    /// retry; another failure leaves its error in `errno`.
    private static func socketRead(_ bio: OpaquePointer?, _ bytes: UnsafeMutablePointer<CChar>?, _ length: CInt) -> CInt {
        portkit_bio_clear_retry(bio)
        let socket = FileDescriptor(rawValue: portkit_bio_fd(bio))
        do {
            return CInt(try socket.receive(into: UnsafeMutableRawBufferPointer(start: bytes, count: Int(length))))
        } catch {
            if error == .wouldBlock { portkit_bio_set_retry_read(bio) }
            errno = error.rawValue
            return -1
        }
    }

    /// The common name of `certificate`'s subject (an `X509 *`), if it has one.
    static func commonName(of certificate: OpaquePointer) -> String? {
        guard let subject = X509_get_subject_name(certificate) else { return nil }
        var name = [CChar](repeating: 0, count: 256)
        let length = X509_NAME_get_text_by_NID(subject, NID_commonName, &name, CInt(name.count))
        guard length > 0 else { return nil }
        return String(decoding: name.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The failed `open` that says why a file cannot be read, or `nil` when it can.
    static func unreadable(_ path: String) -> SystemCallError? {
        do {
            try FileDescriptor.open(path, flags: O_RDONLY).close()
            return nil
        } catch {
            return SystemCallError("open", error)
        }
    }
}
