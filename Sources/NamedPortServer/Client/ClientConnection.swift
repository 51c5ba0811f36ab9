import Glibc
import PortMessaging

/// One connection to a name server: requests written by the calling threads, frames read
/// on the shared client I/O thread and handed to whoever waits for them.
///
/// Callers block (with a deadline) until their reply arrives. What the server sends
/// unasked is handled on the I/O thread: a brokered connection for a registered name is
/// adopted into its `ReceivePort`, a watch event goes to its `WatchSink`.
final class ClientConnection: Sendable {
    let address: String
    let socket: FileDescriptor
    private let io: LoopThread
    private let state: ConditionLock<State>
    /// Serialises writes, and guards the socket against being closed under a writer.
    private let writer = Locked(WriterState())
    /// The reader and the loop source; used on the I/O thread only (the lock is never
    /// contended, and keeps the type plainly `Sendable`).
    private let reading = Locked(ReadingState())

    private struct State {
        var nextSequence: UInt64 = 1
        var pending: [UInt64: Pending] = [:]
        var ended: NameServerError?
        var registrations: [String: ReceivePort] = [:]
        var watches: [UInt64: WatchSink] = [:]
        var nextWatchID: UInt64 = 1
    }

    private enum Pending {
        case waiting
        case arrived(IncomingFrame)
    }

    private struct WriterState {
        var socketClosed = false
    }

    private struct ReadingState {
        var reader = FrameReader()
        var source: DescriptorSource?
    }

    private init(address: String, socket: FileDescriptor, io: LoopThread) {
        self.address = address
        self.socket = socket
        self.io = io
        self.state = ConditionLock(State())
    }

    // MARK: Connecting

    /// Connects to the server at `address` within `timeout` and starts reading on the
    /// shared I/O thread.
    /// - Throws: `serverUnavailable` (nothing listens, or no file), `permissionDenied`
    ///   (the socket or its directory is not ours), `timedOut` (a full backlog).
    static func open(address: String, timeout: Duration) throws(NameServerError) -> ClientConnection {
        let socket: FileDescriptor
        do {
            socket = try UnixSocket.make(nonBlocking: false)
        } catch {
            throw .system(operation: "socket", errno: error.rawValue)
        }
        do throws(Errno) {
            // A blocking connect waits for room in a full backlog up to SO_SNDTIMEO.
            try UnixSocket.setSendTimeout(socket, timeout)
            try UnixSocket.connect(socket, to: address)
            try socket.setNonBlocking()
        } catch {
            try? socket.close()
            switch error {
            case .noSuchFile: throw .serverUnavailable(address: address, reason: "no socket file")
            case .connectionRefused: throw .serverUnavailable(address: address, reason: "connection refused: the server is gone")
            case .permissionDenied, Errno(rawValue: EPERM):
                throw .permissionDenied(reason: "cannot connect to \(address): \(error)")
            case .wouldBlock: throw .timedOut(operation: "connecting to \(address) (its backlog is full)")
            case Errno(rawValue: ENOTDIR), Errno(rawValue: ENAMETOOLONG), .invalidArgument:
                throw .serverUnavailable(address: address, reason: "\(error)")
            default: throw .serverUnavailable(address: address, reason: "connect: \(error)")
            }
        }
        let io: LoopThread
        do {
            io = try ClientIOThread.shared()
        } catch {
            try? socket.close()
            throw error
        }
        let connection = ClientConnection(address: address, socket: socket, io: io)
        let source = DescriptorSource(descriptor: socket.rawValue, events: .readable) { _, _ in
            connection.readAvailable()
        }
        connection.reading.withLock { $0.source = source }
        do {
            try io.loop.add(source, forMode: .default)
        } catch {
            try? socket.close()
            throw .system(operation: "watch the name server connection: \(error)", errno: EINVAL)
        }
        return connection
    }

    // MARK: Requests

    /// Sends a request and waits for its reply until `deadline`.
    /// - Returns: the ok reply (its descriptors are the caller's).
    /// - Throws: the error an error reply stands for; `timedOut`; `connectionLost`.
    func request(
        _ operation: NameOperation, _ components: [WireComponent], deadline: ContinuousClock.Instant,
        describing what: @autoclosure () -> String
    ) throws(NameServerError) -> IncomingFrame {
        try request(rawOperation: operation.rawValue, components, deadline: deadline, describing: what())
    }

    /// `request` with any operation number (tests send unknown ones).
    func request(
        rawOperation operation: UInt32, _ components: [WireComponent], deadline: ContinuousClock.Instant,
        describing what: @autoclosure () -> String
    ) throws(NameServerError) -> IncomingFrame {
        let sequence = try state.withLock { (state) throws(NameServerError) -> UInt64 in
            if let ended = state.ended { throw ended }
            let sequence = state.nextSequence
            state.nextSequence += 1
            state.pending[sequence] = .waiting
            return sequence
        }
        do {
            let message = WireMessage(kind: .request, id: operation, sequence: sequence, components: components)
            try write(try message.frame(), deadline: deadline)
        } catch {
            state.withLock { _ = $0.pending.removeValue(forKey: sequence) }
            throw error
        }
        let outcome = state.wait(until: deadline) { state -> Result<IncomingFrame, NameServerError>? in
            if case .arrived(let frame)? = state.pending[sequence] {
                state.pending[sequence] = nil
                return .success(frame)
            }
            if let ended = state.ended {
                state.pending[sequence] = nil
                return .failure(ended)
            }
            return nil
        }
        let frame: IncomingFrame
        switch outcome {
        case .success(let arrived)?:
            frame = arrived
        case .failure(let error)?:
            throw error
        case nil:
            // A reply that comes after this is dropped by the reader (its descriptors closed).
            let late = state.withLock { $0.pending.removeValue(forKey: sequence) }
            guard case .arrived(let arrived)? = late else { throw .timedOut(operation: what()) }
            frame = arrived
        }
        guard frame.message.id == NameStatus.ok.rawValue else {
            closeDescriptors(frame.descriptors)
            throw NameReply.decode(status: frame.message.id, frame.message.components)
        }
        return frame
    }

    /// Sends a request whose reply nobody waits for (the reader drops it).
    func requestWithoutWaiting(_ operation: NameOperation, _ components: [WireComponent], deadline: ContinuousClock.Instant) {
        let sequence = state.withLock { state -> UInt64? in
            guard state.ended == nil else { return nil }
            defer { state.nextSequence += 1 }
            return state.nextSequence
        }
        guard let sequence else { return }
        let message = WireMessage(kind: .request, id: operation.rawValue, sequence: sequence, components: components)
        if let frame = try? message.frame() { try? write(frame, deadline: deadline) }
    }

    /// Writes a whole frame, waiting for room in the socket until `deadline`.
    private func write(_ frame: OutgoingFrame, deadline: ContinuousClock.Instant) throws(NameServerError) {
        try writer.withLock { (writer) throws(NameServerError) in
            guard !writer.socketClosed else { throw .connectionLost(address: address) }
            var offset = 0
            while offset < frame.bytes.count {
                let start = offset
                let outcome = frame.bytes.withUnsafeBytes { raw in
                    Result { () throws(Errno) in
                        try socket.send(UnsafeRawBufferPointer(rebasing: raw[start...]))
                    }
                }
                switch outcome {
                case .success(let sent):
                    offset += sent
                case .failure(let error) where error == .wouldBlock:
                    let left = deadline - .now
                    guard left > .zero, (try? socket.poll(CShort(POLLOUT), timeout: left)) ?? 0 != 0 else {
                        // A frame cut in half would garble the stream: give the connection up.
                        if offset > 0 { socket.shutdown() }
                        throw .timedOut(operation: "writing to the name server at \(address)")
                    }
                case .failure:
                    throw .connectionLost(address: address)
                }
            }
        }
    }

    // MARK: Registrations and watches

    /// Notes `port` as the receiver of connections brokered for `name`.
    func addRegistration(_ name: String, _ port: ReceivePort) throws(NameServerError) {
        try state.withLock { (state) throws(NameServerError) in
            if let ended = state.ended { throw ended }
            guard state.registrations[name] == nil else { throw .nameTaken(name: name, ownerPID: getpid()) }
            state.registrations[name] = port
        }
    }

    func removeRegistration(_ name: String, _ port: ReceivePort) {
        state.withLock { state in
            if state.registrations[name] === port { state.registrations[name] = nil }
        }
    }

    func removeRegistrations(named name: String) {
        state.withLock { _ = $0.registrations.removeValue(forKey: name) }
    }

    /// Whether this connection holds `name` (as far as this side knows).
    func holds(_ name: String) -> Bool { state.withLock { $0.registrations[name] != nil } }

    /// Makes the sink of a new watch; events for it are delivered from now on.
    func addWatch() throws(NameServerError) -> (UInt64, WatchSink) {
        try state.withLock { (state) throws(NameServerError) -> (UInt64, WatchSink) in
            if let ended = state.ended { throw ended }
            let id = state.nextWatchID
            state.nextWatchID += 1
            let sink = WatchSink()
            state.watches[id] = sink
            return (id, sink)
        }
    }

    func removeWatch(_ id: UInt64) {
        state.withLock { _ = $0.watches.removeValue(forKey: id) }
    }

    /// The error calls get once the connection has ended, if it has.
    var endError: NameServerError? { state.withLock { $0.ended } }

    // MARK: Reading (I/O thread)

    private func readAvailable() {
        let (frames, end) = reading.withLock { $0.reader.read(from: socket) }
        for frame in frames { dispatch(frame) }
        if let end { finish(end) }
    }

    private func dispatch(_ frame: IncomingFrame) {
        let message = frame.message
        switch message.kind {
        case .reply:
            let taken = state.withLock { state -> Bool in
                guard case .waiting? = state.pending[message.sequence] else { return false }
                state.pending[message.sequence] = .arrived(frame)
                return true
            }
            if taken { state.broadcast() } else { closeDescriptors(frame.descriptors) }
        case .message:
            switch NameNotice(rawValue: message.id) {
            case .connectionOffer?: adopt(frame)
            case .appeared?, .vanished?: deliverEvent(frame)
            case nil: closeDescriptors(frame.descriptors)
            }
        default:
            // Not something a name server sends.
            closeDescriptors(frame.descriptors)
        }
    }

    /// A looker's connection to a name this connection registered: into the port it goes.
    private func adopt(_ frame: IncomingFrame) {
        var fields = NameFieldReader(frame.message.components)
        guard let name = try? fields.string(), (try? fields.port()) == 0, frame.descriptors.count == 1 else {
            closeDescriptors(frame.descriptors)
            return
        }
        let connectionSocket = FileDescriptor(rawValue: frame.descriptors[0])
        guard let port = state.withLock({ $0.registrations[name] }) else {
            // Released meanwhile: the looker sees its peer gone.
            try? connectionSocket.close()
            return
        }
        // The port owns the socket even when it refuses it (invalidated): it closes it,
        // and the looker sees its peer gone.
        try? port.adoptConnection(connectionSocket)
    }

    private func deliverEvent(_ frame: IncomingFrame) {
        closeDescriptors(frame.descriptors)
        var fields = NameFieldReader(frame.message.components)
        guard let watchID = try? fields.integer(), let owner = try? fields.owner() else { return }
        guard let sink = state.withLock({ $0.watches[watchID] }) else { return }
        sink.deliver(frame.message.id == NameNotice.appeared.rawValue ? .appeared(owner) : .vanished(owner))
    }

    /// The connection is over: fail the waiting calls, end the watches, forget the
    /// registrations (the server released them), close the socket.
    private func finish(_ end: StreamEnd) {
        let error = NameServerError.connectionLost(address: address)
        let sinks = state.withLock { state -> [WatchSink] in
            if state.ended == nil { state.ended = error }
            state.registrations = [:]
            defer { state.watches = [:] }
            return Array(state.watches.values)
        }
        state.broadcast()
        for sink in sinks { sink.end(error) }
        reading.withLock { reading in
            reading.source?.invalidate()
            reading.source = nil
            reading.reader.discard()
        }
        writer.withLock { writer in
            guard !writer.socketClosed else { return }
            writer.socketClosed = true
            try? socket.close()
        }
    }

    // MARK: Closing

    /// Ends the connection: the server releases its names at once. Calls in progress and
    /// later fail with `connectionLost`.
    func close() {
        state.withLock { state in
            if state.ended == nil { state.ended = .connectionLost(address: address) }
        }
        state.broadcast()
        // The I/O thread sees the end of the stream and closes the socket.
        writer.withLock { writer in
            if !writer.socketClosed { socket.shutdown() }
        }
    }
}

/// The thread every client connection of the process reads on, started on first use.
enum ClientIOThread {
    private static let thread = Locked<LoopThread?>(nil)

    static func shared() throws(NameServerError) -> LoopThread {
        try thread.withLock { (thread) throws(NameServerError) -> LoopThread in
            if let thread { return thread }
            let made = try LoopThread(name: "portkit.names.io")
            thread = made
            return made
        }
    }
}
