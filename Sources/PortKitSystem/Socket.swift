import CPortKitSystem
import Glibc

/// Unix-domain socket calls on `FileDescriptor`, each made through `systemCall` (its `EINTR`
/// policy, its fault seam) and throwing `Errno`.
extension FileDescriptor {
    /// Makes a connected pair of Unix-domain sockets (close-on-exec, optionally non-blocking).
    ///
    /// The corresponding C function is `socketpair`.
    package static func socketPair(
        type: CInt = CInt(SOCK_SEQPACKET.rawValue), nonBlocking: Bool = true
    ) throws(Errno) -> (FileDescriptor, FileDescriptor) {
        var fds: (CInt, CInt) = (-1, -1)
        let flags = type | CInt(SOCK_CLOEXEC.rawValue) | (nonBlocking ? CInt(SOCK_NONBLOCK.rawValue) : 0)
        try withUnsafeMutableBytes(of: &fds) { raw throws(Errno) in
            let p = raw.baseAddress!.assumingMemoryBound(to: CInt.self)
            try nothingOrErrno(.socketpair) { socketpair(AF_UNIX, flags, 0, p) }.get()
        }
        return (FileDescriptor(rawValue: fds.0), FileDescriptor(rawValue: fds.1))
    }

    /// Sends `bytes` with `descriptors` attached (SCM_RIGHTS), never raising SIGPIPE and never
    /// blocking. Returns the number of bytes sent.
    ///
    /// The corresponding C function is `sendmsg` with `MSG_NOSIGNAL | MSG_DONTWAIT` (`send`
    /// when there are no descriptors).
    package func send(_ bytes: UnsafeRawBufferPointer, descriptors: [CInt] = []) throws(Errno) -> Int {
        // Without descriptors, plain `send`: the kernel's sendmsg path (copying in a message
        // header and an iovec array) costs measurably more per small message.
        if descriptors.isEmpty {
            return try systemCall(.send, on: rawValue, count: bytes.count) {
                Glibc.send(rawValue, bytes.baseAddress, $0, CInt(MSG_NOSIGNAL) | CInt(MSG_DONTWAIT))
            }.get()
        }
        return try systemCall(.sendmsg, on: rawValue, count: bytes.count) { count in
            descriptors.withUnsafeBufferPointer { fds in
                portkit_send_with_descriptors(
                    rawValue, bytes.baseAddress, count, fds.baseAddress, CInt(fds.count),
                    CInt(MSG_NOSIGNAL) | CInt(MSG_DONTWAIT))
            }
        }.get()
    }

    /// Sends `head` then `body` in one call, as if they were one buffer (a gathered write:
    /// neither is copied next to the other), never raising SIGPIPE and never blocking.
    /// Returns the number of bytes sent, counted from the start of `head`.
    ///
    /// The corresponding C function is `sendmsg` with two `iovec`s and `MSG_NOSIGNAL |
    /// MSG_DONTWAIT`.
    package func send(_ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try systemCall(.sendmsg, on: rawValue, count: head.count + body.count) { count in
            withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
                // `count` is the whole unless a test's fault seam shortens the write.
                let first = min(head.count, count)
                vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress), iov_len: first)
                vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: min(body.count, count - first))
                var message = msghdr()
                message.msg_iov = vectors.baseAddress
                message.msg_iovlen = 2
                return Glibc.sendmsg(rawValue, &message, CInt(MSG_NOSIGNAL) | CInt(MSG_DONTWAIT))
            }
        }.get()
    }

    /// Receives one datagram (or what a stream has) into `buffer`, and the descriptors sent
    /// with it (close-on-exec) into `descriptors`, without allocating. Returns the bytes
    /// received (0: the peer closed), how many descriptors arrived (the caller owns and must
    /// close them), and whether the datagram or its descriptors did not fit (the excess is
    /// discarded; excess descriptors are closed), and the sender's credentials when the
    /// socket passes them (`passCredentials()`).
    ///
    /// Never blocks unless `waiting`; then, on a socket without `O_NONBLOCK`, it waits for
    /// data up to the socket's receive timeout (`setReceiveTimeout`), after which it throws
    /// `Errno.wouldBlock`.
    ///
    /// The corresponding C function is `recvmsg` with `MSG_CMSG_CLOEXEC`, and `MSG_DONTWAIT`
    /// unless `waiting`.
    package func receive(
        into buffer: UnsafeMutableRawBufferPointer, descriptors: UnsafeMutableBufferPointer<CInt>, waiting: Bool = false
    ) throws(Errno) -> (count: Int, descriptors: Int, truncated: Bool, sender: (pid: pid_t, uid: uid_t, gid: gid_t)?) {
        var count: CInt = 0
        var truncated: CInt = 0
        var pid: pid_t = 0, uid: uid_t = 0, gid: gid_t = 0
        var hasCredentials: CInt = 0
        let n = try valueOrErrno(.recvmsg, on: rawValue) {
            portkit_receive_with_credentials(
                rawValue, buffer.baseAddress, buffer.count, descriptors.baseAddress, CInt(descriptors.count),
                &count, &truncated, waiting ? 0 : CInt(MSG_DONTWAIT), &pid, &uid, &gid, &hasCredentials)
        }.get()
        if count > 0, portkit_fault_seam_armed() != 0,
           FaultSeam.take(.receivedDescriptors, descriptor: rawValue) == .descriptorsDropped {
            FileDescriptor.close(Array(UnsafeBufferPointer(rebasing: descriptors[..<Int(count)])))
            (count, truncated) = (0, 1)
        }
        return (n, Int(count), truncated != 0, hasCredentials != 0 ? (pid, uid, gid) : nil)
    }

    /// Makes every receive on the socket bring the sender's credentials (the kernel's, not
    /// the sender's word): the process that wrote the data, wherever the socket was made.
    ///
    /// The corresponding C function is `setsockopt` with `SO_PASSCRED`.
    package func passCredentials() throws(Errno) {
        try nothingOrErrno { portkit_pass_credentials(rawValue) }.get()
    }

    /// Receives up to `buffer.count` bytes of a stream, never blocking; returns how many
    /// (0: the peer closed its end).
    ///
    /// The corresponding C function is `recv` with `MSG_DONTWAIT`.
    package func receive(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno(.recv, on: rawValue) {
            Glibc.recv(rawValue, buffer.baseAddress, buffer.count, CInt(MSG_DONTWAIT))
        }.get()
    }

    /// Copies up to `buffer.count` bytes from the head of the incoming data into `buffer`
    /// without taking them (a later receive gets them again), never blocking.
    ///
    /// The corresponding C function is `recv` with `MSG_PEEK | MSG_DONTWAIT`.
    package func peek(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try valueOrErrno(.recv, on: rawValue) { Glibc.recv(rawValue, buffer.baseAddress, buffer.count, CInt(MSG_PEEK) | CInt(MSG_DONTWAIT)) }.get()
    }

    /// Sets how long a waiting receive (`receive(into:descriptors:waiting:)` with `waiting`)
    /// waits for data before it gives up. The kernel rounds it up to whole clock ticks
    /// (1 to 4 ms on common kernels).
    ///
    /// The corresponding C function is `setsockopt` with `SO_RCVTIMEO`.
    package func setReceiveTimeout(microseconds: Int) throws(Errno) {
        var limit = timeval(tv_sec: microseconds / 1_000_000, tv_usec: microseconds % 1_000_000)
        try nothingOrErrno {
            setsockopt(rawValue, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        }.get()
    }

    /// Waits until the descriptor is ready for `events` (`POLLIN`, `POLLOUT`) or `timeout`
    /// passes (`nil`: for ever). Returns the ready events (`revents`), or 0 on time-out.
    /// Interrupted by a signal, it waits again for the time left.
    ///
    /// The corresponding C function is `poll`.
    package func poll(_ events: CShort, timeout: Duration?) throws(Errno) -> CShort {
        let deadline = timeout.map { ContinuousClock.now + $0 }
        let result = try valueOrErrno(.poll, on: rawValue) { () -> CInt in
            var milliseconds: CInt = -1
            if let deadline {
                let left = deadline - .now
                milliseconds = left <= .zero ? 0 : CInt(min(left / .milliseconds(1), Double(CInt.max / 2)).rounded(.up))
            }
            return portkit_poll_one(rawValue, events, milliseconds)
        }.get()
        return Self.audited(CShort(truncatingIfNeeded: result))
    }

    /// Waits up to `milliseconds` (-1: for ever) until the descriptor is ready for `events`.
    /// Returns the ready events (`revents`), or 0 when the time passed. Interrupted by a
    /// signal, it waits again for the whole time: a wait that must end by a deadline uses
    /// `poll(_:timeout:)`.
    ///
    /// The corresponding C function is `poll`.
    package func poll(_ events: CShort, milliseconds: CInt) throws(Errno) -> CShort {
        let result = try valueOrErrno(.poll, on: rawValue) { portkit_poll_one(rawValue, events, milliseconds) }.get()
        return Self.audited(CShort(truncatingIfNeeded: result))
    }

    /// `revents` as they are, with a poll of a descriptor that is not open counted.
    private static func audited(_ revents: CShort) -> CShort {
        if revents & CShort(POLLNVAL) != 0 { SystemCallAudit.badDescriptors.add(1, ordering: .relaxed) }
        return revents
    }

    /// Shuts down reading and writing, waking every thread blocked on the socket.
    ///
    /// The corresponding C function is `shutdown`.
    package func shutdown() {
        _ = Glibc.shutdown(rawValue, CInt(SHUT_RDWR))
    }

    /// The peer's process id, user id and group id (SO_PEERCRED).
    ///
    /// The corresponding C function is `getsockopt`.
    package func peerCredentials() throws(Errno) -> (pid: pid_t, uid: uid_t, gid: gid_t) {
        var pid: pid_t = 0, uid: uid_t = 0, gid: gid_t = 0
        try nothingOrErrno { portkit_peer_credentials(rawValue, &pid, &uid, &gid) }.get()
        return (pid, uid, gid)
    }
}
