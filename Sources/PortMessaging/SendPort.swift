import Glibc
import PermanentThread
import PortKitLocks
import Synchronization
import PortKitSystem

/// A handle to send messages to a `ReceivePort`: in this process, or in another one over a
/// Unix socket or a pipe — the same calls for all.
///
/// Sending never drops a message silently: it is delivered, or the call throws
/// (`sendTimedOut` when the receiver stayed full past the timeout, `peerDied`,
/// `invalidPort`, `messageTooLarge`). A send port can travel inside a message, to a thread
/// or another process, which can then send to the same receive port directly.
public final class SendPort: Sendable {
    /// How long a request waits for room to be sent, and then for its reply, unless its
    /// caller says otherwise: 10 seconds.
    public static let defaultTimeout: Duration = .seconds(10)

    enum Route: Sendable {
        case local(ReceivePort)
        case connection(Connection)
    }

    let route: Route
    /// Whether this send right is still held: read on every send, so an atomic.
    private let valid = Atomic<Bool>(true)
    /// `route`'s object, unretained, for `send`: `route` keeps it alive as long as this send
    /// port lives. It spares the retain and release a `switch route` makes on every message:
    /// atomic operations on a count shared with the receiving thread in-process, and slow
    /// ones for a receive port, which is weakly referenced elsewhere (its bindings and
    /// peers), so its counts live in a side table.
    private let unretained: UnretainedRoute

    enum UnretainedRoute {
        case local(Unmanaged<ReceivePort>)
        case connection(Unmanaged<Connection>)
    }

    init(local port: ReceivePort) {
        route = .local(port)
        unretained = .local(.passUnretained(port))
    }

    init(connection: Connection) {
        route = .connection(connection)
        unretained = .connection(.passUnretained(connection))
    }

    /// Takes ownership of a connected stream socket whose peer is a receive port's
    /// connection (as a name server hands out).
    package convenience init(adoptingSocket socket: FileDescriptor) {
        try? socket.setNonBlocking()
        self.init(connection: Connection(.socket(socket)))
    }

    /// Whether messages can still be sent: false once invalidated, once the receive port is
    /// invalidated, or once the peer process died or closed.
    public var isValid: Bool {
        guard valid.load(ordering: .acquiring) else { return false }
        switch route {
        case .local(let port): return port.isValid
        case .connection(let connection): return connection.isOpen
        }
    }

    /// The process at the other end, as the kernel names it: for a port from
    /// `connect(to:)`, the process that listens there (SO_PEERCRED, what a client checks
    /// before it trusts a server); for a port that travelled, the process that made its
    /// connection; the child or the parent over pipes; this process in-process. `nil` once
    /// the connection is closed.
    public var remoteCredentials: SenderCredentials? {
        switch route {
        case .local: return .thisProcess
        case .connection(let connection): return connection.remoteCredentials
        }
    }

    /// Gives up this send right; a connection to another process is closed.
    public func invalidate() {
        valid.store(false, ordering: .releasing)
        if case .connection(let connection) = route { connection.close(.invalidPort) }
    }

    func checkValid() throws(PortError) {
        guard valid.load(ordering: .acquiring) else { throw .invalidPort }
    }

    /// Sends a one-way message.
    /// - Parameters:
    ///   - message: the message; descriptor components are duplicated for the receiver.
    ///   - timeout: how long to wait while the receiver is full; `nil` waits as long as it takes.
    /// - Throws: `.sendTimedOut`, `.invalidPort`, `.peerDied`, `.messageTooLarge`,
    ///   `.descriptorsNeedASocket`, `.cannotCrossHosts` (a descriptor or port over TCP).
    public func send(_ message: Message, timeout: Duration? = nil) throws(PortError) {
        try checkValid()
        // `_withUnsafeGuaranteedRef` only rethrows untyped errors: carry the typed one out.
        let result: Result<Void, PortError>
        switch unretained {
        case .local(let port):
            result = port._withUnsafeGuaranteedRef { port in
                Result { () throws(PortError) in
                    // The clock is read only if the queue is full: the timeout is how long
                    // to wait for room, counted from finding none.
                    try port.enqueue(.init(message: try Self.localCopy(of: message, limit: port.maxMessageBytes))) {
                        timeout.map { ContinuousClock.now + $0 }
                    }
                }
            }
        case .connection(let connection):
            result = connection._withUnsafeGuaranteedRef { connection in
                Result { () throws(PortError) in
                    // The clock is read only if the write has to wait.
                    try write(message, kind: .message, sequence: 0, on: connection) { timeout.map { ContinuousClock.now + $0 } }
                }
            }
        }
        try result.get()
    }

    /// Sends a request and waits for its reply (CFMessagePortSendRequest), blocking the
    /// calling thread: the receiving port's handler returns the reply. From a task, the
    /// async `request(_:sendTimeout:receiveTimeout:)` suspends instead; the two have
    /// different names so that `try await port.request(…)` never picks this one.
    /// - Parameters:
    ///   - message: the request to send.
    ///   - sendTimeout: how long to wait for room to send; `nil` as long as it takes.
    ///   - receiveTimeout: how long to wait for the reply once sent; `nil` as long as it takes.
    /// - Throws: `.sendTimedOut` (not sent), `.receiveTimedOut` (sent, no reply in time),
    ///   `.peerDied` (the peer went away, before or while waiting), `.invalidPort`,
    ///   `.messageTooLarge`.
    public func blockingRequest(
        _ message: Message, sendTimeout: Duration? = SendPort.defaultTimeout, receiveTimeout: Duration? = SendPort.defaultTimeout
    ) throws(PortError) -> Message {
        let request = try start(message, sendTimeout: sendTimeout)
        do { return try request.reply(timeout: receiveTimeout) } catch {
            request.end()
            throw error
        }
    }

    /// Calls `handler` on `loop`'s thread when this port becomes invalid because its receive
    /// port was invalidated or its peer process died or closed — within one pass of `loop`.
    /// - Throws: `.loop(.loopEnded)` when the loop has ended.
    public func onInvalidation(on loop: ThreadLoop = .current, _ handler: @escaping @Sendable (SendPort) -> Void) throws(PortError) {
        // Not `weak`: that would give the port a side table, and every retain of it on every
        // request the runtime's slow path.
        let port = Unretained(self)
        let notify: @Sendable () -> Void = {
            guard let port = port.object else { return }
            if loop.isCurrent { handler(port) } else { try? loop.perform { handler(port) } }
        }
        switch route {
        case .local(let port):
            port.onInvalidation { _ in notify() }
        case .connection(let connection):
            connection.onClose { _ in notify() }
            try connection.watchForHangup(on: loop)
        }
    }

    // MARK: Internals

    /// Writes `message` as one frame; true when the write had to wait (for another writer
    /// or for room).
    @discardableResult
    func write(
        _ message: Message, kind: WireKind, sequence: UInt64, on connection: Connection, deadline: ContinuousClock.Instant?
    ) throws(PortError) -> Bool {
        try write(message, kind: kind, sequence: sequence, on: connection, deadline: { deadline })
    }

    /// `write` with the deadline asked for only if the write has to wait.
    @discardableResult
    private func write(
        _ message: Message, kind: WireKind, sequence: UInt64, on connection: Connection,
        deadline: () -> ContinuousClock.Instant?
    ) throws(PortError) -> Bool {
        try WireMapping.withFrame(for: message, kind: kind, sequence: sequence, limits: connection.outgoingLimits(for: message)) {
            (frame, descriptors) throws(PortError) -> Bool in
            try connection.write(frame, descriptors: descriptors, deadline: deadline)
        }
    }

    /// Sends the check-in of the protocol: the worker's port travels as the reply port, or,
    /// on a connection, the connection itself becomes the worker's port.
    func sendCheckIn(id: UInt32, from port: ReceivePort, deadline: ContinuousClock.Instant) throws(PortError) {
        try checkValid()
        switch route {
        case .local(let boss):
            try boss.enqueue(.init(message: Message(id: id, replyPort: port.makeSendPort()), isCheckIn: true), deadline: deadline)
        case .connection(let connection):
            try port.adopt(connection)
            try write(Message(id: id), kind: .checkIn, sequence: 0, on: connection, deadline: deadline)
        }
    }

    /// A new connection end to this port, to send to another process: the receive port (or
    /// the peer holding it) adopts the other end. For a port in this process that is done
    /// at once; for a port of another process, by `handOff`, which the caller runs once the
    /// frame carrying the end is written (the receiver's answer is on the critical path,
    /// the owner's adoption is not: what the receiver sends waits in the socket until the
    /// owner's port adopts its end), or with `false` to drop the other end unsent.
    func transferableEnd() throws(PortError) -> (end: FileDescriptor, handOff: (@Sendable (Bool) -> Void)?) {
        try checkValid()
        let (mine, theirs) = try Connection.makeSocketPair()
        switch route {
        case .local(let port):
            do {
                try port.adoptPairEnd(mine)
            } catch {
                try? theirs.close()
                throw error
            }
            return (theirs, nil)
        case .connection(let connection):
            guard connection.carriesDescriptors else {
                try? mine.close()
                try? theirs.close()
                throw connection.medium.refusal("a port reached over TCP")
            }
            return (theirs, { sent in
                defer { try? mine.close() }
                // A port whose owner is gone by now arrives dead: its first use says so.
                guard sent, let control = try? WireCodec.encodeControl() else { return }
                try? connection.write(control, descriptors: [mine.rawValue], deadline: .now + ReceivePort.replySendTimeout)
            })
        }
    }

    /// A copy of `message` for in-process delivery, with descriptors duplicated so the
    /// receiver owns its own (as it would across processes).
    static func localCopy(of message: Message, limit: Int) throws(PortError) -> Message {
        _ = try message.checkedSize(maxBytes: limit)
        var copy = message
        copy.sender = .thisProcess
        guard message.parts.contains(where: { if case .descriptor = $0 { true } else { false } }) else { return copy }
        for (index, component) in message.parts.enumerated() {
            guard case .descriptor(let fd) = component else { continue }
            do {
                copy.parts[index] = .descriptor(try FileDescriptor(rawValue: fd).duplicate().rawValue)
            } catch {
                for made in copy.parts[..<index] {
                    if case .descriptor(let fd) = made { try? FileDescriptor(rawValue: fd).close() }
                }
                throw error == .badFileDescriptor ? .invalidDescriptor(fd) : PortError("dup", error)
            }
        }
        return copy
    }
}
