import Glibc
import PermanentThread

/// The listening socket of a `ReceivePort` bound to an address: each peer that connects
/// becomes one more connection into the port, read on the port's loop like any other.
final class PortListener: Sendable {
    let address: PortAddress
    private let socket: FileDescriptor
    /// The socket file this listener made (its device and inode), so that closing removes
    /// that file and never one another process put at the same path since.
    private let madeFile: FileSystem.Status?
    /// What accepts, once the port is scheduled; a spare descriptor for running out.
    private let state = Locked(State())

    private struct State {
        var source: DescriptorSource?
        var loop: ThreadLoop?
        var closed = false
        /// Closed to make room when accepting fails for want of descriptors: the client is
        /// then accepted and closed at once (it sees its peer die), instead of the loop
        /// spinning on a listening socket it cannot empty.
        var spare: FileDescriptor?
    }

    private init(address: PortAddress, socket: FileDescriptor, madeFile: FileSystem.Status?) {
        self.address = address
        self.socket = socket
        self.madeFile = madeFile
        state.withLock { $0.spare = try? FileSystem.openNull() }
    }

    /// Binds a listening socket to `address`, replacing a stale socket file.
    /// - Throws: `.addressInUse` (a live listener is there), `.system`.
    static func open(_ address: PortAddress, permissions: mode_t, backlog: CInt) throws(PortError) -> PortListener {
        let socket: FileDescriptor
        do { socket = try UnixSocket.make(nonBlocking: true) } catch { throw PortError("socket", error) }
        do throws(PortError) {
            try bind(socket, to: address)
            var made: FileSystem.Status?
            if case .path(let path) = address {
                do {
                    try FileSystem.setPermissions(path, permissions)
                    made = try FileSystem.status(path)
                } catch {
                    try? FileSystem.remove(path)
                    throw PortError("chmod \(path)", error)
                }
            }
            do { try UnixSocket.listen(socket, backlog: backlog) } catch {
                if case .path(let path) = address { try? FileSystem.remove(path) }
                throw PortError("listen", error)
            }
            return PortListener(address: address, socket: socket, madeFile: made)
        } catch {
            try? socket.close()
            throw error
        }
    }

    /// Binds, and where a socket file is in the way, replaces it if no one listens there.
    private static func bind(_ socket: FileDescriptor, to address: PortAddress) throws(PortError) {
        let bound: Result<Void, Errno> = Result { () throws(Errno) in
            try UnixSocket.bind(socket, to: address.name, abstract: address.isAbstract)
        }
        guard case .failure(let error) = bound else { return }
        guard error == .addressInUse, case .path(let path) = address else {
            throw error == .addressInUse ? .addressInUse(address.description) : PortError("bind \(address)", error)
        }
        // Only a stale socket file (its listener gone) is replaced; anything else stays.
        switch try? UnixSocket.probe(path) {
        case .stale?: try? FileSystem.remove(path)
        case .free?: break
        case .live?, .notASocket?, nil: throw .addressInUse(address.description)
        }
        do { try UnixSocket.bind(socket, to: path) } catch { throw PortError("bind \(address)", error) }
    }

    /// Starts accepting on `loop`, in `modes`, into `port`.
    func start(on loop: ThreadLoop, modes: [LoopMode], into port: ReceivePort) {
        let source = DescriptorSource(descriptor: socket.rawValue, events: .readable) { [weak self, weak port] _, _ in
            guard let self, let port else { return }
            self.acceptAll(into: port)
        }
        let open = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.source = source
            state.loop = loop
            return true
        }
        guard open else { return }
        for mode in modes { try? loop.add(source, forMode: mode) }
    }

    private func acceptAll(into port: ReceivePort) {
        while true {
            switch Result(catching: { () throws(Errno) in try UnixSocket.accept(socket) }) {
            case .success(let accepted?):
                try? port.adoptConnection(accepted)
            case .success(nil):
                return
            case .failure(let error) where error.rawValue == EMFILE || error.rawValue == ENFILE:
                guard refuseOne() else { return }
            case .failure:
                return
            }
        }
    }

    /// Out of descriptors: takes one pending client with the spare and closes it.
    private func refuseOne() -> Bool {
        guard let spare = state.withLock({ $0.spare.take() }) else { return false }
        try? spare.close()
        if let accepted = try? UnixSocket.accept(socket) { try? accepted.close() }
        state.withLock { $0.spare = try? FileSystem.openNull() }
        return true
    }

    /// Stops listening: the socket is closed (on the loop's thread, after its source is
    /// removed) and the socket file this listener made is removed.
    func close() {
        let taken = state.withLock { state -> (DescriptorSource?, ThreadLoop?, FileDescriptor?)? in
            guard !state.closed else { return nil }
            state.closed = true
            defer { state.source = nil; state.loop = nil; state.spare = nil }
            return (state.source, state.loop, state.spare)
        }
        guard let (source, loop, spare) = taken else { return }
        if case .path(let path) = address, let made = madeFile { FileSystem.remove(path, ifStill: made) }
        let socket = self.socket
        let finish: @Sendable () -> Void = {
            source?.invalidate()
            try? socket.close()
            try? spare?.close()
        }
        if let loop { Connection.onLoopThread(loop, finish) } else { finish() }
    }

    deinit { close() }
}

extension SendPort {
    /// A send port connected to the port listening at `address`, in this process or any
    /// other (CFMessagePortCreateRemote).
    /// - Parameters:
    ///   - address: where the port listens.
    ///   - timeout: how long to wait while the listener's backlog is full.
    /// - Throws: `.noListener` (nothing listens there), `.sendTimedOut`, `.system`.
    public static func connect(to address: PortAddress, timeout: Duration = .seconds(10)) throws(PortError) -> SendPort {
        let socket: FileDescriptor
        do { socket = try UnixSocket.make(nonBlocking: false) } catch { throw PortError("socket", error) }
        do throws(Errno) {
            try UnixSocket.setSendTimeout(socket, timeout)
            try UnixSocket.connect(socket, to: address.name, abstract: address.isAbstract)
            try socket.setNonBlocking()
        } catch {
            try? socket.close()
            switch error.rawValue {
            case ENOENT, ECONNREFUSED: throw .noListener(address.description)
            case EAGAIN, EINPROGRESS: throw .sendTimedOut
            default: throw PortError("connect \(address)", error)
            }
        }
        return SendPort(connection: Connection(.socket(socket)))
    }
}
