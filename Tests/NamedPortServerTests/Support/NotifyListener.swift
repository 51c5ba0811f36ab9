import Glibc

/// The service manager's end of the notify protocol, for tests: a datagram socket that
/// `portnamed` finds through `NOTIFY_SOCKET` and writes its states to.
final class NotifyListener {
    /// What `NOTIFY_SOCKET` must say: the path, or `@name` for an abstract address.
    let address: String
    private let socket: CInt

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Binds a socket at `path`, or with `abstract`, at the abstract name `path` names.
    init(path: String, abstract: Bool) throws {
        let socket = Glibc.socket(AF_UNIX, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        var bytes = Array(path.utf8)
        if abstract { bytes.insert(0, at: 0) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let length = MemoryLayout.offset(of: \sockaddr_un.sun_path)! + bytes.count + (abstract ? 0 : 1)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(length)) }
        }
        guard bound == 0 else {
            close(socket)
            throw Failure(description: "bind \(path): errno \(errno)")
        }
        self.socket = socket
        self.address = abstract ? "@" + path : path
    }

    deinit {
        close(socket)
    }

    /// The next datagram's `KEY=VALUE` lines, waiting up to `timeout` for it.
    func next(within timeout: Duration = .seconds(60)) throws -> [String: String] {
        var poller = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(timeout / .milliseconds(1))
        guard poll(&poller, 1, milliseconds) == 1 else { throw Failure(description: "no notification within \(timeout)") }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(socket, &buffer, buffer.count, 0)
        guard count > 0 else { throw Failure(description: "recv: errno \(errno)") }
        var state: [String: String] = [:]
        for line in String(decoding: buffer[..<count], as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            state[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        return state
    }
}
