import Glibc

/// Small files and directory listings: what reading a configuration directory needs.
package enum FileContents {
    /// The bytes of the regular file at `path`, at most `limit` of them (a longer file is
    /// refused with `EFBIG`, so a runaway file is never read whole).
    ///
    /// The corresponding C functions are `open` (with `O_CLOEXEC`), `read` and `close`.
    package static func read(atPath path: String, limit: Int) throws(Errno) -> [UInt8] {
        let descriptor = FileDescriptor(rawValue: try valueOrErrno { open(path, O_RDONLY | O_CLOEXEC) }.get())
        defer { try? descriptor.close() }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let result = chunk.withUnsafeMutableBytes { buffer in
                valueOrErrno(.read, on: descriptor.rawValue) { Glibc.read(descriptor.rawValue, buffer.baseAddress, buffer.count) }
            }
            let count = try result.get()
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[..<count])
            if bytes.count > limit { throw Errno(rawValue: EFBIG) }
        }
    }

    /// The names of the entries of the directory at `path` (without `.` and `..`), in
    /// the order the file system gives them.
    ///
    /// The corresponding C functions are `opendir`, `readdir` and `closedir`.
    package static func entries(ofDirectory path: String) throws(Errno) -> [String] {
        guard let directory = opendir(path) else { throw Errno.current }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
