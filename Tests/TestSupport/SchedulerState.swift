import Foundation
import Glibc

/// The scheduler's state of a thread of this process, by its kernel id: "R" running, "S"
/// asleep, ... (`/proc/self/task/ID/stat`); `nil` if the thread is gone.
package func schedulerState(ofThread threadID: Int32) -> String? {
    schedulerState(path: "/proc/self/task/\(threadID)/stat")
}

/// The state field of the `/proc` stat file at `path`; `nil` if it cannot be read.
private func schedulerState(path: String) -> String? {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { return nil }
    defer { close(descriptor) }
    var bytes = [UInt8](repeating: 0, count: 512)
    let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
    guard count > 0 else { return nil }
    // "tid (comm) S ...": the state follows the last ')'.
    let text = String(decoding: bytes.prefix(count), as: UTF8.self)
    guard let close = text.lastIndex(of: ")") else { return nil }
    return text[text.index(after: close)...].split(separator: " ").first.map(String.init)
}

/// Whether every thread of process `pid` is stopped (state "T" in `/proc/PID/task/ID/stat`);
/// false when the process is gone or a thread's state cannot be read.
package func threadsStopped(ofProcess pid: pid_t) -> Bool {
    guard let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"), !threads.isEmpty else {
        return false
    }
    return threads.allSatisfy { schedulerState(path: "/proc/\(pid)/task/\($0)/stat") == "T" }
}
