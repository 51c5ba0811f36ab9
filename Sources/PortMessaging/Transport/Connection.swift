import CPortKitSystem
import Glibc
import PermanentThread
import Synchronization

extension WireLimits {
    /// The limits of a connection whose messages may carry `maxMessageBytes` of bytes
    /// components: the frame adds the header and a 5-byte header per component.
    static func transport(maxMessageBytes: Int = ReceivePort.defaultMaxMessageBytes) -> WireLimits {
        WireLimits(maxFrameBytes: maxMessageBytes + WireLayout.headerSize + WireLayout.componentHeaderSize * 1024)
    }

    /// The largest total of bytes components these limits let through.
    var maxMessageBytes: Int { maxFrameBytes - WireLayout.headerSize - WireLayout.componentHeaderSize * 1024 }
}

/// A framed two-way channel to one peer: a SOCK_STREAM Unix socket (descriptors travel
/// with SCM_RIGHTS) or a pair of pipes (bytes only).
///
/// Writing: any thread; one frame at a time (a frame is never interleaved with another),
/// waiting for room up to the send deadline. Reading: either a run loop (when the
/// connection is bound to a `ReceivePort`: frames go to its handler, replies to their
/// waiters), or, on an unbound connection, the thread waiting for a reply reads itself.
/// The connection owns its descriptors and closes them once.
final class Connection: Sendable {
    enum Medium: Sendable {
        case socket(FileDescriptor)
        case pipes(read: FileDescriptor, write: FileDescriptor)
    }

    let medium: Medium
    let limits: WireLimits
    var readFD: FileDescriptor {
        switch medium { case .socket(let fd): fd; case .pipes(let read, _): read }
    }
    var writeFD: FileDescriptor {
        switch medium { case .socket(let fd): fd; case .pipes(_, let write): write }
    }
    var carriesDescriptors: Bool { if case .socket = medium { true } else { false } }

    /// A frame is being written (the token that keeps frames whole).
    private let writing = ConditionLock<Bool>(false)
    /// Bytes and descriptors read but not yet made into messages.
    private let inbound: Locked<Inbound>
    /// Replies by request sequence number, and who waits for them.
    private let replies = ConditionLock(Replies())
    /// Whether the connection is open, and what it is bound to.
    private let life = Locked(Life())
    /// One request at a time on an unbound connection (its requester reads the reply).
    let requestToken = ConditionLock<Bool>(false)
    private let sequences = Atomic<UInt64>(1)

    struct Inbound {
        var splitter: WireFrameSplitter
        var descriptors: [CInt] = []
    }

    struct Replies {
        var waiting: Set<UInt64> = []
        var arrived: [UInt64: Message] = [:]
        var failure: PortError?
    }

    struct Life {
        var open = true
        /// Weak: the port owns its connections, not the other way round.
        weak var port: ReceivePort?
        var loop: ThreadLoop?
        var source: DescriptorSource?
        var closedHandlers: [@Sendable (PortError) -> Void] = []
        var watchers: [Watcher] = []
    }

    init(_ medium: Medium, limits: WireLimits = .transport()) {
        self.medium = medium
        self.limits = limits
        inbound = Locked(Inbound(splitter: WireFrameSplitter(limits: limits)))
    }

    /// Makes a connected pair of socket connections (both in this process, for now).
    static func socketPair(limits: WireLimits = .transport()) throws(PortError) -> (Connection, Connection) {
        let (a, b) = try makeSocketPair()
        return (Connection(.socket(a), limits: limits), Connection(.socket(b), limits: limits))
    }

    /// A connected pair of non-blocking stream sockets.
    static func makeSocketPair() throws(PortError) -> (FileDescriptor, FileDescriptor) {
        do {
            return try FileDescriptor.socketPair(type: CInt(SOCK_STREAM.rawValue), nonBlocking: true)
        } catch {
            throw PortError("socketpair", error)
        }
    }

    var isOpen: Bool { life.withLock { $0.open } }

    func nextSequence() -> UInt64 { sequences.wrappingAdd(1, ordering: .relaxed).oldValue }

    /// Runs `handler` once when the connection closes (at once if it is closed already).
    func onClose(_ handler: @escaping @Sendable (PortError) -> Void) {
        let closedAlready = life.withLock { life -> Bool in
            if life.open { life.closedHandlers.append(handler) }
            return !life.open
        }
        if closedAlready { handler(replies.withLock { $0.failure } ?? .peerDied) }
    }

    // MARK: Writing

    /// Writes one frame with its descriptors before `deadline`.
    ///
    /// The deadline covers waiting for the writer token and for room before the first byte.
    /// Once part of a frame is out it must be finished (a half frame would corrupt the
    /// stream): the rest gets a grace period, after which the connection is closed.
    func write(_ frame: [UInt8], descriptors: [CInt], deadline: ContinuousClock.Instant?) throws(PortError) {
        guard isOpen else { throw replies.withLock { $0.failure } ?? .invalidPort }
        if !descriptors.isEmpty && !carriesDescriptors { throw .descriptorsNeedASocket }
        let claimed = writing.wait(until: deadline) { busy -> Bool? in
            if busy { return nil }
            busy = true
            return true
        }
        guard claimed != nil else { throw .sendTimedOut }
        defer {
            writing.withLock { $0 = false }
            writing.broadcast()
        }
        var offset = 0
        var pending = descriptors
        while offset < frame.count {
            switch writeSome(frame, from: offset, descriptors: pending) {
            case .success(let written):
                offset += written
                pending = []
            case .failure(.wouldBlock):
                let limit = offset == 0 ? deadline : ContinuousClock.now + Self.partialFrameGrace
                let ready: CShort
                do { ready = try writeFD.poll(CShort(POLLOUT), timeout: limit.map { $0 - .now }) } catch {
                    throw PortError("poll", error)
                }
                if ready == 0 {
                    guard offset > 0 else { throw .sendTimedOut }
                    close(.peerDied)
                    throw .peerDied
                }
            case .failure(let error):
                let failure = PortError(connection: "send", error)
                if failure == .peerDied { close(.peerDied) }
                throw failure
            }
        }
    }

    /// One write of what is left of a frame (descriptors go with the first byte).
    private func writeSome(_ frame: [UInt8], from offset: Int, descriptors: [CInt]) -> Result<Int, Errno> {
        frame.withUnsafeBytes { raw in
            let rest = UnsafeRawBufferPointer(rebasing: raw[offset...])
            switch medium {
            case .socket(let fd):
                return Result { () throws(Errno) -> Int in try fd.send(rest, descriptors: descriptors) }
            case .pipes(_, let fd):
                return valueOrErrno { portkit_write_nosigpipe(fd.rawValue, rest.baseAddress, rest.count) }
            }
        }
    }

    /// One read into `buffer`, with the descriptors that came along.
    private func readSome(into buffer: inout [UInt8]) -> Result<FileDescriptor.Received, Errno> {
        buffer.withUnsafeMutableBytes { raw in
            switch medium {
            case .socket(let fd):
                return Result { () throws(Errno) -> FileDescriptor.Received in try fd.receive(into: raw) }
            case .pipes(let fd, _):
                return Result { () throws(Errno) -> FileDescriptor.Received in
                    FileDescriptor.Received(count: try fd.read(into: raw), descriptors: [], truncated: false)
                }
            }
        }
    }

    /// How long the rest of a frame may take once its first byte is written.
    static let partialFrameGrace: Duration = .seconds(10)

    // MARK: Reading

    /// What to do with each complete message read.
    enum Delivery {
        case reply(UInt64, Message)
        case incoming(WireKind, UInt64, Message)
        case adopt(FileDescriptor)
    }

    /// Reads what is available (without blocking) and turns it into deliveries. Returns
    /// false when the peer closed or the stream broke (the connection is then closed).
    private func readAvailable(maxChunks: Int, _ deliver: (Delivery) -> Void) -> Bool {
        let chunkSize = 256 * 1024
        var scratch = [UInt8](repeating: 0, count: chunkSize)
        for _ in 0..<maxChunks {
            let got: FileDescriptor.Received
            switch readSome(into: &scratch) {
            case .success(let received): got = received
            case .failure(.wouldBlock): return true
            case .failure(let error):
                close(PortError(connection: "receive", error))
                return false
            }
            if got.count == 0 {
                for fd in got.descriptors { Glibc.close(fd) }
                close(.peerDied)
                return false
            }
            let frames = inbound.withLock { state -> Result<[([UInt8], [CInt])], PortError> in
                state.descriptors += got.descriptors
                scratch.withUnsafeBytes { state.splitter.append(UnsafeRawBufferPointer(rebasing: $0[..<got.count])) }
                var frames: [([UInt8], [CInt])] = []
                do throws(WireError) {
                    while let frame = try state.splitter.nextFrame() {
                        let count = frame.withUnsafeBytes { (try? WireHeader.parse($0, limits: limits))??.descriptorCount } ?? 0
                        guard count <= state.descriptors.count else {
                            return .failure(.malformed("frame announces \(count) descriptors, \(state.descriptors.count) arrived"))
                        }
                        frames.append((frame, Array(state.descriptors.prefix(count))))
                        state.descriptors.removeFirst(count)
                    }
                } catch {
                    return .failure(.malformed(error.description))
                }
                return .success(frames)
            }
            switch frames {
            case .failure(let error):
                close(error)
                return false
            case .success(let frames):
                for (frame, descriptors) in frames {
                    do throws(PortError) {
                        deliver(try decode(frame, descriptors))
                    } catch {
                        close(error)
                        return false
                    }
                }
            }
            if got.count < chunkSize { return true }
        }
        return true
    }

    private func decode(_ frame: [UInt8], _ descriptors: [CInt]) throws(PortError) -> Delivery {
        let wire: WireMessage
        do {
            wire = try WireCodec.decode(frame, descriptorCount: descriptors.count, limits: limits)
        } catch {
            for fd in descriptors { Glibc.close(fd) }
            throw .malformed(error.description)
        }
        if wire.kind == .adoptConnection {
            guard descriptors.count == 1 else {
                for fd in descriptors { Glibc.close(fd) }
                throw .malformed("adopt-connection frame without exactly one descriptor")
            }
            return .adopt(FileDescriptor(rawValue: descriptors[0]))
        }
        let message = WireMapping.message(from: wire, descriptors: descriptors, limits: limits)
        return wire.kind == .reply ? .reply(wire.sequence, message) : .incoming(wire.kind, wire.sequence, message)
    }

    /// Called by the loop when a bound connection is readable.
    fileprivate func loopCanRead() {
        let port = life.withLock { $0.port }
        _ = readAvailable(maxChunks: 16) { delivery in
            switch delivery {
            case .reply(let sequence, let message): complete(sequence, with: message)
            case .incoming(let kind, let sequence, let message):
                if let port { port.receive(message, kind: kind, sequence: sequence, from: self) } else { discard(message) }
            case .adopt(let socket):
                if let port { try? port.adoptConnection(socket) } else { try? socket.close() }
            }
        }
    }

    private func complete(_ sequence: UInt64, with message: Message) {
        let taken = replies.withLock { table -> Bool in
            guard table.waiting.contains(sequence) else { return false }
            table.arrived[sequence] = message
            return true
        }
        if taken { replies.broadcast() } else { discard(message) }
    }

    /// Closes the descriptors of a message no one will receive.
    private func discard(_ message: Message) {
        for fd in message.descriptors { Glibc.close(fd) }
    }

    // MARK: Requests

    /// Registers interest in the reply to `sequence` (before the request is written).
    func expectReply(_ sequence: UInt64) {
        replies.withLock { _ = $0.waiting.insert(sequence) }
    }

    /// Forgets a reply no one waits for any more.
    func abandonReply(_ sequence: UInt64) {
        let late = replies.withLock { table -> Message? in
            table.waiting.remove(sequence)
            return table.arrived.removeValue(forKey: sequence)
        }
        if let late { discard(late) }
    }

    /// Waits for the reply to `sequence` until `deadline`. On a bound connection the loop
    /// reads; on an unbound one this thread does.
    func awaitReply(_ sequence: UInt64, deadline: ContinuousClock.Instant?) throws(PortError) -> Message {
        defer { abandonReply(sequence) }
        let (bound, loop) = life.withLock { ($0.port != nil, $0.loop) }
        if bound, let loop, loop.isCurrent, let mode = loop.currentMode ?? Optional(LoopMode.default) {
            // This thread reads the connection: run its loop until the reply is in.
            while replies.withLock({ $0.arrived[sequence] == nil && $0.failure == nil }),
                  deadline.map({ ContinuousClock.now < $0 }) ?? true {
                _ = try? loop.run(mode: mode, until: deadline ?? .now + .seconds(3600), returnAfterSourceHandled: true)
            }
        }
        while true {
            let outcome = replies.wait(until: bound ? deadline : .now) { table -> Result<Message, PortError>? in
                if let message = table.arrived.removeValue(forKey: sequence) { return .success(message) }
                if let failure = table.failure { return .failure(failure) }
                return nil
            }
            if let outcome { return try outcome.get() }
            if bound { throw .receiveTimedOut }
            // Unbound: read until the reply is in, the peer goes, or time runs out.
            let ready: CShort
            do { ready = try readFD.poll(CShort(POLLIN), timeout: deadline.map { $0 - .now }) } catch {
                throw PortError("poll", error)
            }
            if ready == 0 { throw .receiveTimedOut }
            _ = readAvailable(maxChunks: 64) { delivery in
                switch delivery {
                case .reply(let sequence, let message): complete(sequence, with: message)
                case .incoming(_, _, let message): discard(message)  // nothing receives here
                case .adopt(let socket): try? socket.close()
                }
            }
        }
    }

    // MARK: Binding and closing

    /// Binds the connection to a receive port: a descriptor source on the port's loop, in
    /// its modes, reads frames and hands them to the port.
    func bind(to port: ReceivePort, loop: ThreadLoop, modes: [LoopMode]) throws(PortError) {
        let source = DescriptorSource(descriptor: readFD.rawValue, events: .readable) { [weak self] _, _ in
            self?.loopCanRead()
        }
        let stillOpen = life.withLock { life -> Bool in
            guard life.open else { return false }
            life.port = port
            life.loop = loop
            life.source = source
            return true
        }
        guard stillOpen else { throw .peerDied }
        do {
            for mode in modes { try loop.add(source, forMode: mode) }
        } catch {
            close(.invalidPort)
            throw error == .loopEnded ? .invalidPort : .system(operation: "add descriptor source", errno: EINVAL)
        }
    }

    /// Watches the connection for its peer's death on `loop`: a hang-up-only source (incoming
    /// data does not wake it) on a duplicate of the descriptor, so it never collides with
    /// the source that reads a bound connection.
    func watchForHangup(on loop: ThreadLoop) throws(PortError) {
        let duplicate: FileDescriptor
        do { duplicate = try readFD.duplicate() } catch { throw PortError("dup", error) }
        let source = DescriptorSource(descriptor: duplicate.rawValue, events: .hangup) { [weak self] _, events in
            if events.contains(.hangup) || events.contains(.error) { self?.close(.peerDied) }
        }
        let installed = life.withLock { life -> Bool in
            guard life.open else { return false }
            life.watchers.append(Watcher(loop: loop, source: source, descriptor: duplicate))
            return true
        }
        guard installed else {
            try? duplicate.close()
            return
        }
        do { try loop.add(source, forMode: .common) } catch { throw .invalidPort }
    }

    /// A hang-up watcher: its source, its loop, and the duplicate descriptor it watches.
    struct Watcher {
        let loop: ThreadLoop
        let source: DescriptorSource
        let descriptor: FileDescriptor
    }

    /// Closes the connection once: waiters fail with `reason`, the descriptors are closed
    /// (on the bound loop's thread, after its source is removed, so a reused descriptor
    /// number is never deregistered by mistake), and close handlers run.
    func close(_ reason: PortError) {
        let (wasOpen, source, loop, handlers, watchers) = life.withLock { life in
            let result = (life.open, life.source, life.loop, life.closedHandlers, life.watchers)
            life.open = false
            life.source = nil
            life.port = nil
            life.closedHandlers = []
            life.watchers = []
            return result
        }
        guard wasOpen else { return }
        for watcher in watchers {
            Self.onLoopThread(watcher.loop) {
                watcher.source.invalidate()
                try? watcher.descriptor.close()
            }
        }
        replies.withLock { table in if table.failure == nil { table.failure = reason } }
        replies.broadcast()
        // Wake any thread blocked on this socket (a writer waiting for room, a reader).
        writeFD.shutdown()
        let medium = self.medium
        let pendingDescriptors = inbound.withLock { state in
            defer { state.descriptors = [] }
            return state.descriptors
        }
        let finish: @Sendable () -> Void = {
            source?.invalidate()
            switch medium {
            case .socket(let fd): try? fd.close()
            case .pipes(let read, let write): try? read.close(); try? write.close()
            }
            for fd in pendingDescriptors { Glibc.close(fd) }
        }
        if let loop { Self.onLoopThread(loop, finish) } else { finish() }
        for handler in handlers { handler(reason) }
    }

    /// Runs `work` on `loop`'s thread (now, if that is this thread; inline if the loop has
    /// ended, when nothing can race with it any more).
    static func onLoopThread(_ loop: ThreadLoop, _ work: @escaping @Sendable () -> Void) {
        if loop.isCurrent || (try? loop.perform(label: "close connection", work)) == nil { work() }
    }

    deinit {
        close(.invalidPort)
    }
}
