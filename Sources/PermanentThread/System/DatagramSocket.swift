import Glibc

/// One datagram to a Unix-domain socket, from a socket made for it: how a daemon tells its
/// service manager its state (systemd's notify protocol).
package enum DatagramSocket {
    /// Sends `bytes` to the socket at `address` (a path, or an abstract name whose first
    /// byte is NUL); `nil` when it went, else why not.
    ///
    /// The corresponding C functions are `socket` (`SOCK_DGRAM`) and `sendto`.
    package static func send(_ bytes: [UInt8], to address: [UInt8]) -> Errno? {
        let made = valueOrErrno { Glibc.socket(AF_UNIX, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0) }
        guard case .success(let raw) = made else {
            if case .failure(let error) = made { return error }
            return nil
        }
        let endpoint = FileDescriptor(rawValue: raw)
        defer { try? endpoint.close() }
        var target = sockaddr_un()
        target.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &target.sun_path) { raw in
            for (index, byte) in address.enumerated() where index < raw.count { raw[index] = byte }
        }
        // An abstract name's length counts exactly its bytes; a path's, its NUL too.
        let length = MemoryLayout.offset(of: \sockaddr_un.sun_path)! + address.count + (address.first == 0 ? 0 : 1)
        let sent = withUnsafePointer(to: &target) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                valueOrErrno { sendto(raw, bytes, bytes.count, CInt(MSG_NOSIGNAL), generic, socklen_t(length)) }
            }
        }
        if case .failure(let error) = sent { return error }
        return nil
    }
}
