import Glibc
import PortMessaging

/// One connection to a name server: requests written by the calling threads, replies
/// handed to whoever waits for them.
///
/// Who reads the socket depends on what the connection is for:
/// - **direct** (from the start): what arrives is replies and watch events, which someone
///   is (or will be) waiting for, so a waiting caller (of a request, or of `NameWatch.next`)
///   reads the socket itself: one waiter at a time takes the reader's role and hands what
///   it reads for others over. No thread hop: a lookup costs what a round trip costs.
/// - **threaded** (from the first registration on): the server may send a brokered
///   connection for a registered name at any moment, with nobody waiting for it, so the
///   shared client I/O thread reads: it adopts connections into their `ReceivePort` and
///   hands replies and events to whoever waits.
/// The switch happens once, while no caller holds the reader's role.
final class ClientConnection: Sendable {
    let address: String
    let socket: FileDescriptor
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
        var watches: [UInt64: WatchQueue] = [:]
        var nextWatchID: UInt64 = 1
        /// Whether the I/O thread reads (else callers do).
        var threaded = false
        /// A caller is reading the socket (direct mode).
        var readerBusy = false
        /// A switch to threaded mode waits for the reader's role.
        var switching = false
    }

    private enum Pending {
        /// No reply yet; the fields of its parts so far (`more`, version 3), in order.
        case waiting([WireComponent])
        case arrived(IncomingFrame)
    }

    /// A watch's events not yet taken by `NameWatch.next`.
    private struct WatchQueue {
        var events: [NameEvent] = []
        var head = 0
        /// Set when the watch ended early (too many unread events).
        var end: NameServerError?
    }

    /// Unread events kept per watch; past that the watch ends with `limitExceeded`.
    static let maxQueuedEvents = 100_000

    private struct WriterState {
        var socketClosed = false
    }

    private struct ReadingState {
        var reader = FrameReader()
        var source: DescriptorSource?
    }

    private init(address: String, socket: FileDescriptor) {
        self.address = address
        self.socket = socket
        self.state = ConditionLock(State())
    }

    deinit {
        // Closed here when nothing else closed it (a direct connection never used again).
        writer.withLock { writer in
            if !writer.socketClosed { try? socket.close() }
        }
        reading.withLock { $0.reader.discard() }
    }

    // MARK: Connecting

    /// Connects to the server at `address` within `timeout` (in direct mode), if it is
    /// one this client trusts (`ServerTrust`).
    /// - Throws: `untrustedServer` (checked before anything is sent), `serverUnavailable`
    ///   (nothing listens, or no file), `permissionDenied` (the socket or its directory is
    ///   not ours), `timedOut` (a full backlog).
    static func open(
        address: String, timeout: Duration, trustedUsers: Set<UInt32> = []
    ) throws(NameServerError) -> ClientConnection {
        let trust = ServerTrust(address: address, trustedUsers: trustedUsers)
        try trust.checkDirectory()
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
        do {
            try trust.checkServer(on: socket)
        } catch {
            try? socket.close()
            throw error
        }
        return ClientConnection(address: address, socket: socket)
    }

    /// Hands the reading to the shared I/O thread, for good (before the first registration
    /// or watch). Waits until no caller holds the reader's role.
    func becomeThreaded() throws(NameServerError) {
        let mustSwitch = try state.withLock { (state) throws(NameServerError) -> Bool in
            if let ended = state.ended { throw ended }
            if state.threaded || state.switching { return false }
            state.switching = true
            return true
        }
        guard mustSwitch else {
            // Another caller is switching: wait until it is done.
            _ = state.wait(until: nil) { $0.threaded || $0.ended != nil ? true : nil }
            return
        }
        // A direct reader gives the role back within one slice of its wait.
        _ = state.wait(until: nil) { $0.readerBusy ? nil : true }
        do throws(NameServerError) {
            let loop = try ClientIOThread.shared()
            // The source keeps the connection alive until `finish` (on the I/O thread) has
            // removed it and closed the socket there, so a reused descriptor number is never
            // deregistered by mistake.
            let source = DescriptorSource(descriptor: socket.rawValue, events: .readable) { _, _ in
                self.readOnIOThread()
            }
            reading.withLock { $0.source = source }
            do {
                try loop.add(source, forMode: .default)
            } catch {
                throw .system(operation: "watch the name server connection: \(error)", errno: EINVAL)
            }
        } catch {
            state.withLock { $0.switching = false }
            state.broadcast()
            throw error
        }
        state.withLock { state in
            state.threaded = true
            state.switching = false
        }
        state.broadcast()
    }

    // MARK: Requests

    /// Sends a request and waits for its reply until `deadline`.
    /// - Returns: the ok reply (its descriptors are the caller's).
    /// - Throws: the error an error reply stands for; `timedOut`; `connectionLost`.
    /// - Parameter descriptors: sent with the request (its port components refer to them);
    ///   closed here once sent, or when the request fails.
    func request(
        _ operation: NameOperation, _ components: [WireComponent], descriptors: [CInt] = [],
        deadline: ContinuousClock.Instant, describing what: @autoclosure () -> String
    ) throws(NameServerError) -> IncomingFrame {
        try request(rawOperation: operation.rawValue, components, descriptors: descriptors, deadline: deadline, describing: what())
    }

    /// `request` with any operation number (tests send unknown ones).
    func request(
        rawOperation operation: UInt32, _ components: [WireComponent], descriptors: [CInt] = [],
        deadline: ContinuousClock.Instant, describing what: @autoclosure () -> String
    ) throws(NameServerError) -> IncomingFrame {
        // Ours until sent: the kernel then holds its own references.
        defer { closeDescriptors(descriptors) }
        let sequence = try state.withLock { (state) throws(NameServerError) -> UInt64 in
            if let ended = state.ended { throw ended }
            let sequence = state.nextSequence
            state.nextSequence += 1
            state.pending[sequence] = .waiting([])
            return sequence
        }
        do {
            let message = WireMessage(kind: .request, id: operation, sequence: sequence, components: components)
            try write(try message.frame(with: descriptors), deadline: deadline)
        } catch {
            // A server that closed its end may have said why first (a `closing` notice):
            // the reader finds it before the end, and the wait below returns it.
            guard case .connectionLost = error, !writer.withLock({ $0.socketClosed }) else {
                state.withLock { _ = $0.pending.removeValue(forKey: sequence) }
                throw error
            }
        }
        let outcome = awaitOutcome(until: deadline) { state -> Result<IncomingFrame, NameServerError>? in
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
            throw NameReply.decode(status: frame.message.id, frame.message.components, address: address)
        }
        return frame
    }

    /// What a waiting caller does next.
    private enum Step<Outcome> {
        case done(Outcome)
        case read
    }

    /// Waits until `take` finds what the caller waits for, or `deadline` passes (`nil`:
    /// no deadline), reading the socket itself while the connection is direct and no
    /// other caller reads. `take` runs under the lock, after every change; it must answer
    /// once the connection has ended. Returns `nil` on time-out.
    private func awaitOutcome<Outcome>(
        until deadline: ContinuousClock.Instant?, _ take: @escaping (inout State) -> Outcome?
    ) -> Outcome? {
        func next(_ state: inout State) -> Step<Outcome>? {
            if let outcome = take(&state) { return .done(outcome) }
            if !state.threaded && !state.switching && !state.readerBusy && state.ended == nil {
                state.readerBusy = true
                return .read
            }
            return nil
        }
        while true {
            let step = state.withLock { next(&$0) } ?? state.wait(until: deadline, { next(&$0) })
            switch step {
            case .done(let outcome)?:
                return outcome
            case .read?:
                readDirectly(until: deadline)
            case nil:
                return nil
            }
            if let deadline, ContinuousClock.now >= deadline {
                // One last look: it may have come with the last read.
                return state.withLock { take(&$0) }
            }
        }
    }

    /// Holding the reader's role: waits for the socket to be readable (one slice at most,
    /// so a switch to threaded mode is never held up long), reads and dispatches what came,
    /// and gives the role back.
    private func readDirectly(until deadline: ContinuousClock.Instant?) {
        let slice = min(deadline.map { $0 - .now } ?? .milliseconds(50), .milliseconds(50))
        let ready = slice > .zero ? ((try? socket.poll(CShort(POLLIN), timeout: slice)) ?? 1) : 1
        if ready != 0 {
            let (frames, end) = reading.withLock { $0.reader.read(from: socket) }
            for frame in frames { dispatch(frame) }
            // Still holding the role: nobody else touches the socket while it closes.
            if let end { finish(end) }
        }
        state.withLock { $0.readerBusy = false }
        state.broadcast()
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
                // The descriptors go with the first byte.
                let descriptors = offset == 0 ? frame.descriptors : []
                let outcome = frame.bytes.withUnsafeBytes { raw in
                    Result { () throws(Errno) in
                        try socket.send(UnsafeRawBufferPointer(rebasing: raw[start...]), descriptors: descriptors)
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
                    // The stream is unusable: shut it so the reader reaches its end (after
                    // anything the server sent before it closed, such as why).
                    socket.shutdown()
                    throw .connectionLost(address: address)
                }
            }
        }
    }

    // MARK: Registrations and watches

    /// Notes `port` as the receiver of connections brokered for `name`.
    func addRegistration(_ name: String, _ port: ReceivePort) throws(NameServerError) {
        try becomeThreaded()
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

    /// Opens the queue of a new watch; its events are kept from now on.
    func addWatch() throws(NameServerError) -> UInt64 {
        try state.withLock { (state) throws(NameServerError) -> UInt64 in
            if let ended = state.ended { throw ended }
            let id = state.nextWatchID
            state.nextWatchID += 1
            state.watches[id] = WatchQueue()
            return id
        }
    }

    /// The next event of watch `id`, waiting until `deadline` (`nil`: for ever).
    /// - Returns: `nil` on time-out or once the watch is removed (cancelled).
    /// - Throws: once the queue is empty, why the watch or the connection ended.
    func nextEvent(_ id: UInt64, deadline: ContinuousClock.Instant?) throws(NameServerError) -> NameEvent? {
        let outcome = awaitOutcome(until: deadline) { state -> Result<NameEvent?, NameServerError>? in
            guard var queue = state.watches[id] else { return .success(nil) }
            if queue.head < queue.events.count {
                let event = queue.events[queue.head]
                queue.head += 1
                if queue.head == queue.events.count {
                    queue.events.removeAll(keepingCapacity: queue.events.capacity <= 1024)
                    queue.head = 0
                }
                state.watches[id] = queue
                return .success(event)
            }
            if let end = queue.end ?? state.ended { return .failure(end) }
            return nil
        }
        return try (outcome ?? .success(nil)).get()
    }

    /// Drops watch `id`'s queue; a caller waiting in `nextEvent` gets `nil`.
    func removeWatch(_ id: UInt64) {
        state.withLock { _ = $0.watches.removeValue(forKey: id) }
        state.broadcast()
    }

    /// The error calls get once the connection has ended, if it has.
    var endError: NameServerError? { state.withLock { $0.ended } }

    // MARK: Reading

    private func readOnIOThread() {
        let (frames, end) = reading.withLock { $0.reader.read(from: socket) }
        for frame in frames { dispatch(frame) }
        if let end { finish(end) }
    }

    private func dispatch(_ frame: IncomingFrame) {
        let message = frame.message
        switch message.kind {
        case .reply:
            let taken = state.withLock { state -> Bool in
                guard case .waiting? = state.pending[message.sequence],
                      case .waiting(var parts)? = state.pending.removeValue(forKey: message.sequence) else { return false }
                if message.id == NameStatus.more.rawValue {
                    // Taken out of the table first, so the parts grow in place.
                    parts += message.components
                    state.pending[message.sequence] = .waiting(parts)
                    return false
                }
                var whole = frame
                if message.id == NameStatus.ok.rawValue && !parts.isEmpty { whole.message.components = parts + message.components }
                state.pending[message.sequence] = .arrived(whole)
                return true
            }
            if taken {
                state.broadcast()
            } else if message.id != NameStatus.more.rawValue {
                closeDescriptors(frame.descriptors)
            }
        case .message:
            switch NameNotice(rawValue: message.id) {
            case .connectionOffer?: adopt(frame)
            case .appeared?, .vanished?: deliverEvent(frame)
            case .closing?: noteFarewell(frame)
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

    /// The server says why it is about to close the connection: that is the error every
    /// call gets from now on, rather than a bare `connectionLost`.
    private func noteFarewell(_ frame: IncomingFrame) {
        closeDescriptors(frame.descriptors)
        var fields = NameFieldReader(frame.message.components)
        guard let status = try? fields.integer(), let raw = UInt32(exactly: status) else { return }
        let error = NameReply.decode(status: raw, Array(frame.message.components.dropFirst()), address: address)
        state.withLock { state in
            if state.ended == nil { state.ended = error }
        }
        state.broadcast()
    }

    private func deliverEvent(_ frame: IncomingFrame) {
        closeDescriptors(frame.descriptors)
        var fields = NameFieldReader(frame.message.components)
        guard let watchID = try? fields.integer(), let owner = try? fields.owner() else { return }
        let event: NameEvent = frame.message.id == NameNotice.appeared.rawValue ? .appeared(owner) : .vanished(owner)
        state.withLock { state in
            guard var queue = state.watches[watchID], queue.end == nil else { return }
            if queue.events.count - queue.head >= Self.maxQueuedEvents {
                queue.end = .limitExceeded(what: "unread watch events", limit: Self.maxQueuedEvents)
            } else {
                queue.events.append(event)
            }
            state.watches[watchID] = queue
        }
        state.broadcast()
    }

    /// The connection is over: fail the waiting calls, end the watches, forget the
    /// registrations (the server released them), close the socket.
    private func finish(_ end: StreamEnd) {
        let error = NameServerError.connectionLost(address: address)
        state.withLock { state in
            if state.ended == nil { state.ended = error }
            // The watches keep their queues: the events before the end are still read.
            state.registrations = [:]
        }
        state.broadcast()
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
        let closeNow = state.withLock { state -> Bool in
            if state.ended == nil { state.ended = .connectionLost(address: address) }
            // A direct connection nobody reads is closed here; otherwise the reader (the
            // I/O thread, or the caller holding the role) sees the end and closes it.
            guard !state.threaded && !state.switching && !state.readerBusy else { return false }
            state.readerBusy = true
            return true
        }
        state.broadcast()
        writer.withLock { writer in
            guard !writer.socketClosed else { return }
            if closeNow {
                writer.socketClosed = true
                try? socket.close()
            } else {
                socket.shutdown()
            }
        }
        if closeNow { reading.withLock { $0.reader.discard() } }
    }
}

/// The thread every client connection of the process reads on (once it is threaded),
/// started on first use and kept for the life of the process.
enum ClientIOThread {
    /// Never stopped (a dropped `PermanentThread` would stop, so it is kept here).
    private static let thread = Locked<PermanentThread?>(nil)

    /// The I/O thread's loop.
    static func shared() throws(NameServerError) -> ThreadLoop {
        try thread.withLock { (kept) throws(NameServerError) -> ThreadLoop in
            if let loop = kept?.loop { return loop }
            let thread = PermanentThread(name: "portkit.names.io")
            do {
                try thread.run()
            } catch {
                throw .system(operation: "start the name client's I/O thread: \(error)", errno: EAGAIN)
            }
            kept = thread
            return thread.loop!  // set once `run()` returns
        }
    }
}
