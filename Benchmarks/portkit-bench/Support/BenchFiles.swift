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
}
