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

    /// The socket BIO method (`portkit_bio_method_make`: send with MSG_NOSIGNAL, never
    /// SIGPIPE), made once for the process.
    static var socketMethod: OpaquePointer? { methodBox.method }

    /// The BIO method, in a box Swift may share between threads.
    private struct MethodBox: @unchecked Sendable {
        // @unchecked: the method is made once, before any use, and never changed or freed
        // afterwards; OpenSSL only reads it.
        let method: OpaquePointer?
    }

    private static let methodBox = MethodBox(method: portkit_bio_method_make())

    /// The common name of `certificate`'s subject (an `X509 *`), if it has one.
    static func commonName(of certificate: OpaquePointer) -> String? {
        guard let subject = X509_get_subject_name(certificate) else { return nil }
        var name = [CChar](repeating: 0, count: 256)
        let length = X509_NAME_get_text_by_NID(subject, NID_commonName, &name, CInt(name.count))
        guard length > 0 else { return nil }
        return String(decoding: name.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Why a file cannot be read, or `nil` when it can.
    static func unreadable(_ path: String) -> String? {
        do {
            try FileDescriptor.open(path, flags: O_RDONLY).close()
            return nil
        } catch {
            return String(cString: strerror(error.rawValue))
        }
    }
}
