import CPortKitSystem
import Glibc

// The calls of a TCP stream socket (getaddrinfo, socket, connect, bind, listen, accept,
// getpeername, setsockopt TCP_NODELAY): the System layer's, for the cluster's directory client and its
// ports across hosts.

/// A TCP stream socket over IPv4 or IPv6: resolving, connecting with a deadline, listening.
package enum TCPSocket {
    /// What a host and port resolved to: one address to connect or bind to.
    package struct Address: Sendable {
        /// `AF_INET` or `AF_INET6`.
        package var family: CInt
        /// The `sockaddr_in` or `sockaddr_in6`, as bytes.
        package var bytes: [UInt8]

        /// Whether it is a loopback address: `127.0.0.0/8` or `::1` (nothing else, not even
        /// `0.0.0.0`, which listens on every interface).
        package var isLoopback: Bool {
            switch family {
            // sin_addr follows sin_family and sin_port.
            case AF_INET: return bytes.count >= 8 && bytes[4] == 127
            // sin6_addr follows sin6_family, sin6_port and sin6_flowinfo.
            case AF_INET6: return bytes.count >= 24 && bytes[8..<23].allSatisfy { $0 == 0 } && bytes[23] == 1
            default: return false
            }
        }

        /// The port, from the address's `sin_port` or `sin6_port` (network order).
        package var port: UInt16 { bytes.count >= 4 ? UInt16(bytes[2]) << 8 | UInt16(bytes[3]) : 0 }

        /// The address as a number (`127.0.0.1`, `::1`), or `nil` for another family.
        ///
        /// The corresponding C function is `inet_ntop`.
        package var numericHost: String? {
            let offset = family == AF_INET ? 4 : 8
            guard family == AF_INET || family == AF_INET6, bytes.count >= offset + (family == AF_INET ? 4 : 16) else { return nil }
            return withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN)) { text -> String? in
                bytes.withUnsafeBytes { raw -> String? in
                    guard inet_ntop(family, raw.baseAddress! + offset, text.baseAddress!, socklen_t(text.count)) != nil else { return nil }
                    return String(cString: text.baseAddress!)
                }
            }
        }
    }

    /// Why a host did not resolve: `getaddrinfo`'s own error code and text (not an errno).
    package struct ResolutionFailure: Error, Sendable, CustomStringConvertible {
        /// The `EAI_*` code.
        package var code: CInt
        /// The host asked for.
        package var host: String
        /// "cannot resolve HOST: TEXT".
        package var description: String { "cannot resolve \(host): \(String(cString: gai_strerror(code)))" }
    }

    /// The addresses `host` (a name or a numeric address) and `port` resolve to, for a
    /// stream socket.
    ///
    /// The corresponding C function is `getaddrinfo`.
    package static func resolve(_ host: String, port: UInt16, passive: Bool = false) throws(ResolutionFailure) -> [Address] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = CInt(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)
        var list: UnsafeMutablePointer<addrinfo>?
        let code = getaddrinfo(host, String(port), &hints, &list)
        guard code == 0 else { throw ResolutionFailure(code: code, host: host) }
        defer { freeaddrinfo(list) }
        var addresses: [Address] = []
        var entry = list
        while let info = entry?.pointee {
            if let address = info.ai_addr {
                let bytes = Array(UnsafeRawBufferPointer(start: address, count: Int(info.ai_addrlen)))
                addresses.append(Address(family: info.ai_family, bytes: bytes))
            }
            entry = info.ai_next
        }
        return addresses
    }

    /// A socket connected to `address`, non-blocking, close-on-exec, with `TCP_NODELAY`
    /// (requests are small and wait for their answers). Waits for the handshake until
    /// `deadline`.
    /// - Throws: `ECONNREFUSED` and the like from the handshake; `ETIMEDOUT` at the deadline.
    ///
    /// The corresponding C functions are `socket`, `connect`, `poll` and `getsockopt`
    /// (`SO_ERROR`).
    package static func connect(to address: Address, deadline: ContinuousClock.Instant) throws(Errno) -> FileDescriptor {
        let socket = try startConnecting(to: address)
        do throws(Errno) {
            while try !finishConnecting(socket) {
                guard try socket.poll(CShort(POLLOUT), timeout: max(deadline - .now, .zero)) != 0 else { throw Errno(rawValue: ETIMEDOUT) }
            }
            return socket
        } catch {
            try? socket.close()
            throw error
        }
    }

    /// A non-blocking, close-on-exec socket whose connection to `address` has begun: it is
    /// writable once the handshake ends, and `finishConnecting` says how it went.
    /// - Throws: `ECONNREFUSED` and the like when the connection fails at once.
    ///
    /// The corresponding C functions are `socket` and `connect`.
    package static func startConnecting(to address: Address) throws(Errno) -> FileDescriptor {
        let type = CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue) | CInt(SOCK_NONBLOCK.rawValue)
        let socket = FileDescriptor(rawValue: try valueOrErrno { Glibc.socket(address.family, type, 0) }.get())
        let started = address.bytes.withUnsafeBytes { raw in
            systemCall(.connect, on: socket.rawValue) { _ in
                Glibc.connect(socket.rawValue, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
            }
        }
        if case .failure(let error) = started, error.rawValue != EINPROGRESS {
            try? socket.close()
            throw error
        }
        return socket
    }

    /// Whether the handshake `startConnecting` began has ended (never waits); once it has,
    /// the socket sends small writes at once (`TCP_NODELAY`). The caller closes the socket
    /// when this throws.
    /// - Throws: the handshake's error (`ECONNREFUSED`, `EHOSTUNREACH` …).
    ///
    /// The corresponding C functions are `poll`, `getsockopt` (`SO_ERROR`) and `setsockopt`.
    package static func finishConnecting(_ socket: FileDescriptor) throws(Errno) -> Bool {
        guard try socket.poll(CShort(POLLOUT), milliseconds: 0) != 0 else { return false }
        let pending = try socket.socketError()
        guard pending == 0 else { throw Errno(rawValue: pending) }
        try socket.setNoDelay()
        return true
    }

    /// A listening socket bound to `address` (`SO_REUSEADDR`, non-blocking, close-on-exec),
    /// and the port it is bound to (the one asked, or the kernel's choice for port 0).
    ///
    /// The corresponding C functions are `socket`, `setsockopt`, `bind`, `listen` and
    /// `getsockname`.
    package static func listen(at address: Address, backlog: CInt = 128) throws(Errno) -> (FileDescriptor, port: UInt16) {
        let type = CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue) | CInt(SOCK_NONBLOCK.rawValue)
        let socket = FileDescriptor(rawValue: try valueOrErrno { Glibc.socket(address.family, type, 0) }.get())
        do throws(Errno) {
            var on: CInt = 1
            try nothingOrErrno { setsockopt(socket.rawValue, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<CInt>.size)) }.get()
            let bound = address.bytes.withUnsafeBytes { raw in
                nothingOrErrno {
                    Glibc.bind(socket.rawValue, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
                }
            }
            try bound.get()
            try UnixSocket.listen(socket, backlog: backlog)
            return (socket, try socket.localPort())
        } catch {
            try? socket.close()
            throw error
        }
    }

    /// Accepts one connection (non-blocking, close-on-exec, `TCP_NODELAY`); `nil` when none
    /// waits. The accepting call is the one Unix-domain listeners use.
    package static func accept(_ listener: FileDescriptor) throws(Errno) -> FileDescriptor? {
        guard let socket = try UnixSocket.accept(listener) else { return nil }
        try? socket.setNoDelay()
        return socket
    }
}

extension FileDescriptor {
    /// Sends small writes at once (`TCP_NODELAY`).
    ///
    /// The corresponding C function is `setsockopt`.
    package func setNoDelay() throws(Errno) {
        var on: CInt = 1
        try nothingOrErrno { setsockopt(rawValue, CInt(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<CInt>.size)) }.get()
    }

    /// The error a non-blocking connect ended with (0: none), clearing it.
    ///
    /// The corresponding C function is `getsockopt` with `SO_ERROR`.
    package func socketError() throws(Errno) -> CInt {
        var value: CInt = 0
        var length = socklen_t(MemoryLayout<CInt>.size)
        try nothingOrErrno { getsockopt(rawValue, SOL_SOCKET, SO_ERROR, &value, &length) }.get()
        return value
    }

    /// The address of the peer of a connected IPv4 or IPv6 socket.
    ///
    /// The corresponding C function is `getpeername`.
    package func peerAddress() throws(Errno) -> TCPSocket.Address {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        try withUnsafeMutablePointer(to: &storage) { (pointer) throws(Errno) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { (address) throws(Errno) in
                try nothingOrErrno { getpeername(rawValue, address, &length) }.get()
            }
        }
        let bytes = withUnsafeBytes(of: &storage) { Array($0.prefix(Int(length))) }
        return TCPSocket.Address(family: CInt(storage.ss_family), bytes: bytes)
    }

    /// The local port of a bound IPv4 or IPv6 socket.
    ///
    /// The corresponding C function is `getsockname`.
    package func localPort() throws(Errno) -> UInt16 {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        try withUnsafeMutablePointer(to: &storage) { (pointer) throws(Errno) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { (address) throws(Errno) in
                try nothingOrErrno { getsockname(rawValue, address, &length) }.get()
            }
        }
        return withUnsafeBytes(of: &storage) { raw in
            // sin_port and sin6_port sit at the same offset, in network order.
            UInt16(raw[2]) << 8 | UInt16(raw[3])
        }
    }
}
