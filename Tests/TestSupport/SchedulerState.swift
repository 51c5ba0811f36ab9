import Glibc

/// The scheduler's state of a thread of this process, by its kernel id: "R" running, "S"
/// asleep, ... (`/proc/self/task/ID/stat`); `nil` if the thread is gone.
package func schedulerState(ofThread threadID: Int32) -> String? {
    let descriptor = open("/proc/self/task/\(threadID)/stat", O_RDONLY | O_CLOEXEC)
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
