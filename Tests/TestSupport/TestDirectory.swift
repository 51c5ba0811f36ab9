import Foundation
import Glibc

/// A private directory for one test's files (a name server's socket, an etcd's data),
/// removed afterwards.
package final class TestDirectory: Sendable {
    /// The directory's path.
    package let path: String

    /// Makes `/tmp/pkn-XXXXXX` (mode 0700, or `mode` if given).
    package init(mode: mode_t? = nil) {
        var template = Array("/tmp/pkn-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed: \(errno)")
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if let mode { chmod(path, mode) }
    }

    /// The socket path of the test's server.
    package var address: String { path + "/names.sock" }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}
