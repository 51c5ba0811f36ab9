import Glibc

/// What can make a benchmark fail.
enum BenchmarkError: Error, CustomStringConvertible {
    /// A system call failed.
    case system(operation: String, errno: CInt)
    /// Something the benchmark waits for did not happen in time.
    case timedOut(String)
    /// An impl returned a sample that is not a finite number.
    case badSample(String, String, Double)
    /// Thrown by an impl's `start`: this impl cannot be measured here, and why. The runner
    /// leaves the impl out of the case with a note, and the case goes on without it.
    case notMeasurable(String)

    var description: String {
        switch self {
        case .system(let operation, let errno):
            "\(operation) failed: \(String(cString: strerror(errno))) (errno \(errno))"
        case .timedOut(let what):
            "timed out: \(what)"
        case .badSample(let bench, let impl, let value):
            "\(bench)/\(impl) returned the sample \(value)"
        case .notMeasurable(let why):
            "not measurable: \(why)"
        }
    }

    /// A `.system` error for `operation` from the current `errno`.
    static func lastSystemError(_ operation: String) -> BenchmarkError {
        .system(operation: operation, errno: errno)
    }
}
