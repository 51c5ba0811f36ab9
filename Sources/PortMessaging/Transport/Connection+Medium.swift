import Glibc
import PermanentThread
import PortKitSystem

extension Connection {
    /// What the frames travel over: one Unix stream socket, a pair of pipes, or a TCP
    /// socket to another host, plain or secured.
    ///
    /// Every read and write of a frame's bytes goes through `writeSome` and `readSome`, and
    /// readiness is watched on `readFD` and `writeFD`: a medium that transforms the bytes
    /// (`secured`: TLS over a TCP socket) has its own arms in those two.
    enum Medium: Sendable {
        /// A SOCK_STREAM Unix socket, both ways; descriptors travel with SCM_RIGHTS.
        case socket(FileDescriptor)
        /// A pipe to read and a pipe to write (bytes only).
        case pipes(read: FileDescriptor, write: FileDescriptor)
        /// A plain TCP socket (`Connection+TCP`): bytes only, no sender credentials.
        case tcp(FileDescriptor)
        /// A TCP socket whose bytes a `SecuredStream` transforms (its handshake complete):
        /// bytes only, no sender credentials; the socket stays non-blocking.
        case secured(FileDescriptor, any SecuredStream)

        /// Whether the peer is on this host: a Unix socket or pipes.
        var isLocal: Bool {
            switch self {
            case .socket, .pipes: true
            case .tcp, .secured: false
            }
        }

        /// The descriptor frames are read from.
        var readFD: FileDescriptor {
            switch self { case .socket(let fd), .tcp(let fd), .secured(let fd, _): fd; case .pipes(let read, _): read }
        }

        /// The descriptor frames are written to.
        var writeFD: FileDescriptor {
            switch self { case .socket(let fd), .tcp(let fd), .secured(let fd, _): fd; case .pipes(_, let write): write }
        }

        /// Whether descriptors can travel (a Unix socket only).
        var carriesDescriptors: Bool { if case .socket = self { true } else { false } }

        /// Whether the peer may be on another host (TCP): then neither descriptors nor
        /// ports can travel, and the kernel names no sender.
        var crossesHosts: Bool {
            switch self { case .tcp, .secured: true; case .socket, .pipes: false }
        }

        /// The socket, when the medium's bytes are the socket's own (no transformation
        /// between them): what may be peeked at, and made ready for waiting reads.
        var plainSocket: FileDescriptor? {
            switch self { case .socket(let fd), .tcp(let fd): fd; case .pipes, .secured: nil }
        }

        /// Whether a read may be given any room (a secured read needs a record's): a large
        /// frame is then read straight into its own storage.
        var readsInPlace: Bool { if case .secured = self { false } else { true } }

        /// Why `what` (descriptors, a port) cannot travel on this medium.
        func refusal(_ what: String) -> PortError {
            crossesHosts ? .cannotCrossHosts(what) : .descriptorsNeedASocket
        }

        /// One non-blocking write of `bytes` (descriptors go with the first byte; a pipe
        /// carries none): the count written, or the errno.
        @inline(__always)
        func writeSome(_ bytes: UnsafeRawBufferPointer, descriptors: [CInt]) -> Result<Int, Errno> {
            switch self {
            case .socket(let fd), .tcp(let fd):
                // A TCP connection never has descriptors to send: `checkCanTravel` refused them.
                return Result { () throws(Errno) -> Int in try fd.send(bytes, descriptors: descriptors) }
            case .pipes(_, let fd):
                return Result { () throws(Errno) -> Int in try fd.writeWithoutSignal(bytes) }
            case .secured(_, let stream):
                return Self.result(of: stream.write(bytes), ended: EPIPE)
            }
        }

        /// One non-blocking write of `frame`'s bytes: head and body in one gathered call on a
        /// socket; alone, the head goes first where descriptors go with it (or on pipes and
        /// TLS, which write one buffer at a time), and the body after it in the next call.
        @inline(__always)
        func writeSome(_ frame: FrameBytes, descriptors: [CInt]) -> Result<Int, Errno> {
            guard !frame.body.isEmpty else { return writeSome(frame.head, descriptors: descriptors) }
            guard !frame.head.isEmpty else { return writeSome(frame.body, descriptors: descriptors) }
            if descriptors.isEmpty, let fd = plainSocket {
                return Result { () throws(Errno) -> Int in try fd.send(frame.head, frame.body) }
            }
            return writeSome(frame.head, descriptors: descriptors)
        }

        /// The least room a secured read is given: a TLS record's plaintext (16 KiB) whole.
        static let securedReadRoom = 16 * 1024

        /// A secured stream's transfer as a socket call's result: its end as `ended`'s errno
        /// (EPIPE for a write), and for a read, 0. Why it failed is kept by the caller.
        @inline(__always)
        static func result(of transfer: StreamTransfer, ended: Int32) -> Result<Int, Errno> {
            switch transfer {
            case .transferred(let count): .success(count)
            case .wouldBlock: .failure(.wouldBlock)
            case .closed: ended == 0 ? .success(0) : .failure(Errno(rawValue: ended))
            case .failed(let errno, _): .failure(Errno(rawValue: errno == 0 ? EPROTO : errno))
            }
        }

        /// One read into `buffer`: the count read (0: the peer closed), descriptors that
        /// came with it appended to `inbound.descriptors`, and its sender, if the read names
        /// one, recorded in `inbound.sender`. Non-blocking, unless `waiting` (a socket made
        /// ready for waiting reads).
        @inline(__always)
        func readSome(
            into buffer: UnsafeMutableRawBufferPointer, _ inbound: inout Inbound, waiting: Bool
        ) -> Result<Int, Errno> {
            withUnsafeTemporaryAllocation(of: CInt.self, capacity: Connection.maxReceivedDescriptors) { fds -> Result<Int, Errno> in
                switch self {
                // Over TCP no read brings descriptors or credentials: the sender stays `nil`.
                case .socket(let fd), .tcp(let fd):
                    let received: (count: Int, descriptors: Int, truncated: Bool, sender: (pid: pid_t, uid: uid_t, gid: gid_t)?)
                    do throws(Errno) { received = try fd.receive(into: buffer, descriptors: fds, waiting: waiting) } catch {
                        return .failure(error)
                    }
                    if let sender = received.sender {
                        inbound.sender = SenderCredentials(pid: sender.pid, uid: sender.uid, gid: sender.gid)
                    }
                    if received.descriptors > 0 {
                        inbound.descriptors.append(contentsOf: UnsafeBufferPointer(rebasing: fds[..<received.descriptors]))
                    }
                    if received.truncated { inbound.descriptorsDropped = true }
                    return .success(received.count)
                case .pipes(let fd, _):
                    return Result { () throws(Errno) -> Int in try fd.read(into: buffer) }
                case .secured(_, let stream):
                    // The read buffer (`readChunk`) always has a record's room.
                    precondition(buffer.count >= Self.securedReadRoom, "a secured read needs room for a whole record")
                    let transfer = stream.read(into: buffer)
                    if case .failed(_, let reason) = transfer { inbound.streamFailure = reason }
                    return Self.result(of: transfer, ended: 0)
                }
            }
        }

        /// Closes the medium's descriptors.
        func closeDescriptors() {
            switch self {
            case .socket(let fd), .tcp(let fd), .secured(let fd, _): try? fd.close()
            case .pipes(let read, let write): try? read.close(); try? write.close()
            }
        }
    }

    /// The descriptor frames are read from.
    var readFD: FileDescriptor { medium.readFD }
    /// The descriptor frames are written to.
    var writeFD: FileDescriptor { medium.writeFD }
    /// Whether descriptors can travel over this connection (a socket only).
    var carriesDescriptors: Bool { medium.carriesDescriptors }

    /// The most descriptors one read can bring (Linux's SCM_MAX_FD).
    static let maxReceivedDescriptors = 253

    /// A connected pair of non-blocking stream sockets.
    static func makeSocketPair() throws(PortError) -> (FileDescriptor, FileDescriptor) {
        do {
            return try FileDescriptor.socketPair(type: CInt(SOCK_STREAM.rawValue), nonBlocking: true)
        } catch {
            throw PortError("socketpair", error)
        }
    }
}
