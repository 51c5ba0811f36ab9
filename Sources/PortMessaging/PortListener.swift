import Glibc
import PermanentThread
import PortKitSystem
import PortKitLocks

/// The listening socket of a `ReceivePort` bound to an address (a Unix socket's, or a TCP
/// one's: `PortListener+TCP`): each peer that connects becomes one more connection into
/// the port, read on the port's loop like any other.
final class PortListener: Sendable {
    /// Where it listens; `nil` for an adopted socket bound to no path.
    let address: PortAddress?
    private let socket: FileDescriptor
    /// The socket file this listener made (its device and inode), so that closing removes
    /// that file and never one another process put at the same path since.
    private let madeFile: FileSystem.Status?
    /// What secures each accepted connection before the port takes it (a secured TCP
    /// listener's); `nil`: the port takes each one as it is accepted.
    let streamSecurity: (any StreamSecurity)?
    /// Whether the listening Unix socket passes credentials (SO_PASSCRED): each accepted
    /// socket then inherits it, and its connection needs no system call to set it.
    let passesCredentials: Bool
    /// What accepts, once the port is scheduled; a spare descriptor for running out.
    let state = Locked(State())

    struct State {
        var source: DescriptorSource?
        var loop: ThreadLoop?
        /// The modes the accepting source is in (what a handshake's sources join).
        var modes: [LoopMode] = []
        /// The handshakes of accepted connections not yet secured (`PortListener+Handshake`).
        var handshakes: [ObjectIdentifier: AcceptingHandshake] = [:]
        var closed = false
        /// Closed to make room when accepting fails for want of descriptors: the client is
        /// then accepted and closed at once (it sees its peer die), instead of the loop
        /// spinning on a listening socket it cannot empty.
        var spare: FileDescriptor?
    }

    /// A listener on `socket`, listening already at `address`, which made `madeFile`, its
    /// connections secured by `streamSecurity` if given.
    init(address: PortAddress?, socket: FileDescriptor, madeFile: FileSystem.Status?, streamSecurity: (any StreamSecurity)? = nil) {
        self.address = address
        self.socket = socket
        self.madeFile = madeFile
        self.streamSecurity = streamSecurity
        if case .tcp? = address { passesCredentials = false } else { passesCredentials = (try? socket.passCredentials()) != nil }
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

    /// Takes over a listening socket made by someone else (systemd socket activation):
    /// closed on `close`, its file left to its maker.
    /// - Throws: `.system(EINVAL)` if it is not a listening Unix stream socket.
    static func adopt(_ descriptor: CInt) throws(PortError) -> PortListener {
        let socket = FileDescriptor(rawValue: descriptor)
        guard UnixSocket.isListeningStream(socket) else {
            throw .system(operation: "listen on descriptor \(descriptor): not a listening Unix stream socket", errno: EINVAL)
        }
        do {
            try socket.setNonBlocking()
            try socket.setCloseOnExec()
        } catch {
            throw PortError("fcntl \(descriptor)", error)
        }
        return PortListener(address: UnixSocket.boundPath(socket).map(PortAddress.path), socket: socket, madeFile: nil)
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
            state.modes = modes
            return true
        }
        guard open else { return }
        for mode in modes { try? loop.add(source, forMode: mode) }
    }

    /// Adds the accepting source to `mode` as well (or, with `adding` false, takes it out).
    func change(_ mode: LoopMode, adding: Bool) {
        guard let (source, loop, handshakes) = state.withLock({ state -> (DescriptorSource, ThreadLoop, [AcceptingHandshake])? in
            guard let source = state.source, let loop = state.loop else { return nil }
            if adding { if !state.modes.contains(mode) { state.modes.append(mode) } } else { state.modes.removeAll { $0 == mode } }
            return (source, loop, Array(state.handshakes.values))
        }) else { return }
        if adding { try? loop.add(source, forMode: mode) } else { loop.remove(source, forMode: mode) }
        for handshake in handshakes { handshake.change(mode, adding: adding) }
    }

    /// The most peers a TCP listener accepts in one pass of its loop. Peers that connect
    /// again as fast as they are closed (an attacker whose connections make room for
    /// others) then cannot keep the loop accepting: the handshakes and connections under
    /// way are served between batches.
    static let tcpAcceptBatch = 32

    /// Accepts every waiting peer into `port` (at most `tcpAcceptBatch` over TCP: the rest
    /// in the next pass); then reads what the Unix ones sent already, in this pass (every
    /// peer accepted is reported before any message of this pass).
    private func acceptAll(into port: ReceivePort) {
        var fresh: [Connection] = []
        defer { for connection in fresh { connection.loopCanRead() } }
        var left = isTCP ? Self.tcpAcceptBatch : Int.max
        while left > 0 {
            left -= 1
            switch Result(catching: { () throws(Errno) in try acceptOne() }) {
            case .success(let accepted?):
                if let streamSecurity {
                    beginHandshake(accepted, securedBy: streamSecurity, into: port)
                } else if isTCP {
                    try? port.adoptTCPConnection(accepted)
                } else if port.refuses(accepted) {
                    continue
                } else if let connection = try? port.adoptAccepted(accepted, passesCredentials: passesCredentials) {
                    fresh.append(connection)
                }
            case .success(nil):
                return
            case .failure(let error) where error.rawValue == EMFILE || error.rawValue == ENFILE:
                guard refuseOne() else { return }
            case .failure:
                return
            }
        }
    }

    /// Whether it listens on TCP.
    private var isTCP: Bool { if case .tcp? = address { true } else { false } }

    /// Accepts one waiting peer (with `TCP_NODELAY` over TCP); `nil` when none waits.
    private func acceptOne() throws(Errno) -> FileDescriptor? {
        isTCP ? try TCPSocket.accept(socket) : try UnixSocket.accept(socket)
    }

    /// Out of descriptors: takes one pending client with the spare and closes it; whether
    /// one was there (`accept` fails for want of a descriptor before it looks for one).
    private func refuseOne() -> Bool {
        guard let spare = state.withLock({ $0.spare.take() }) else { return false }
        try? spare.close()
        var refused = false
        if let accepted = try? acceptOne() {
            try? accepted.close()
            refused = true
        }
        state.withLock { $0.spare = try? FileSystem.openNull() }
        return refused
    }

    /// Stops listening: the socket is closed (on the loop's thread, after its source is
    /// removed) and the socket file this listener made is removed.
    func close() {
        let taken = state.withLock { state -> (DescriptorSource?, ThreadLoop?, FileDescriptor?, [AcceptingHandshake])? in
            guard !state.closed else { return nil }
            state.closed = true
            defer { state.source = nil; state.loop = nil; state.spare = nil; state.handshakes = [:] }
            return (state.source, state.loop, state.spare, Array(state.handshakes.values))
        }
        guard let (source, loop, spare, handshakes) = taken else { return }
        if case .path(let path)? = address, let made = madeFile { FileSystem.remove(path, ifStill: made) }
        let socket = self.socket
        let finish: @Sendable () -> Void = {
            source?.invalidate()
            try? socket.close()
            try? spare?.close()
            for handshake in handshakes { handshake.cancel() }
        }
        if let loop { Connection.onLoopThread(loop, finish) } else { finish() }
    }

    deinit { close() }
}
