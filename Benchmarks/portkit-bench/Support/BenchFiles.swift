import Glibc

/// Finding programs and writing the files the bench's private servers are started with.
enum BenchFiles {
    /// The first executable `name` in `$PATH`, or `nil`.
    static func programOnPath(_ name: String) -> String? {
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { access($0, X_OK) == 0 }
    }

    /// Writes `text` to a new file at `path` (mode 0600), replacing any.
    /// - Throws: `BenchmarkError` naming the call that failed.
    static func write(_ text: String, to path: String) throws {
        let file = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard file >= 0 else { throw BenchmarkError.lastSystemError("open \(path)") }
        defer { close(file) }
        let bytes = Array(text.utf8)
        guard bytes.withUnsafeBytes({ RawIO.writeAll(file, $0) }) else { throw BenchmarkError.lastSystemError("write \(path)") }
    }

    /// Makes a fresh private directory `/tmp/PREFIX-XXXXXX` (mkdtemp, mode 0700).
    /// - Throws: `BenchmarkError` when `mkdtemp` fails.
    static func temporaryDirectory(_ prefix: String) throws -> String {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw BenchmarkError.lastSystemError("mkdtemp")
        }
        return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
