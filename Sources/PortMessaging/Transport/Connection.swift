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
    /// Who the peer is over pipes (the kernel names no sender there): the spawned child, or
    /// the parent that spawned this process. Over a socket each read brings its sender.
    let pipePeer: SenderCredentials?
    var readFD: FileDescriptor {
        switch medium { case .socket(let fd): fd; case .pipes(let read, _): read }
    }
    var writeFD: FileDescriptor {
        switch medium { case .socket(let fd): fd; case .pipes(_, let write): write }
    }
    var carriesDescriptors: Bool { if case .socket = medium { true } else { false } }

    /// A frame is being written (the token that keeps frames whole).
    private let writing = ConditionLock<Bool>(false)
    /// The users of the descriptors: every system call on them runs inside
    /// `withDescriptors`, and the last user out of a closed connection releases them.
    private let gate = DescriptorGate()
    /// What releases the descriptors (set by `close`, run once by whoever leaves the gate
    /// last), given the descriptors read but not yet delivered.
    private let release = Locked<(@Sendable ([CInt]) -> Void)?>(nil)
    /// Bytes and descriptors read but not yet made into messages, and the buffer reads go
    /// into; held for the whole of a read, so reads on two threads cannot interleave.
    private let inbound: Locked<Inbound>
    /// The size of the read buffer: the most one read takes.
    private static let readChunk = 256 * 1024
    /// The most descriptors one read can bring (Linux's SCM_MAX_FD).
    private static let maxReceivedDescriptors = 253
    /// The requests in flight, their replies, and why the connection failed.
    private let replies = ConditionLock(RequestTable())
    /// Whether the connection is open, and what it is bound to.
    private let life = Locked(Life())
    /// `life.open`, readable without the lock (every write checks it); cleared in `close`
    /// under `life`'s lock.
    private let openFlag = Atomic<Bool>(true)
    /// Whether a read may wait for data (`readAvailable(waitingFirst:)`): `unknown` until a
    /// wait for a reply first asks (`prepareWaitingReads`), then `ready` (the socket is
    /// blocking, with a receive timeout of `directWaitSlice`) or `unavailable` (pipes, or a
    /// socket that refused). Set once, under `inbound`'s lock.
    private let waitingReads = Atomic<UInt8>(WaitingReads.unknown)

    /// The largest message the peer's port accepts, as it announced (a `limits` frame);
    /// 0 until then.
    private let peerMaxMessageBytes = Atomic<Int>(0)

    /// The values of `waitingReads`.
    enum WaitingReads {
        static let unknown: UInt8 = 0
        static let ready: UInt8 = 1
        static let unavailable: UInt8 = 2
    }

    struct Inbound {
        var splitter: WireFrameSplitter
        var descriptors: [CInt] = []
        /// The sender of the bytes read last (a socket read never spans two senders).
        var sender: SenderCredentials?
        /// Kept from one read to the next (uninitialized memory), made on the first read:
        /// making and zeroing a fresh buffer for every read was most of a small round trip.
        var buffer: UnsafeMutableRawBufferPointer?
        /// The emptied array of the last read that brought several frames, kept for its
        /// capacity (a stream of small messages brings hundreds per read).
        var spareDeliveries: [Delivery] = []
    }

    struct Life {
        var open = true
        /// Weak: the port owns its connections, not the other way round.
        weak var port: ReceivePort?
        /// The port's handler (fixed once the port is scheduled).
        var handler: ReceivePort.Handler?
        var loop: ThreadLoop?
        var source: DescriptorSource?
        var closedHandlers: [@Sendable (PortError) -> Void] = []
        var watchers: [Watcher] = []
    }

    init(_ medium: Medium, limits: WireLimits = .transport(), pipePeer: SenderCredentials? = nil) {
        self.medium = medium
        self.limits = limits
        self.pipePeer = pipePeer
        inbound = Locked(Inbound(splitter: WireFrameSplitter(limits: limits), sender: pipePeer))
        // Every read then names its sender, wherever the socket was made (a socket pair's
        // SO_PEERCRED would name the process that made it, a broker say).
        if case .socket(let fd) = medium { try? fd.passCredentials() }
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

    var isOpen: Bool { openFlag.load(ordering: .acquiring) }

    /// Why the connection closed (`invalidPort` when it was closed without a reason).
    private var closedError: PortError { replies.withLock { $0.failure } ?? .invalidPort }

    /// Runs `body`, which uses the descriptors, as a user of them; `nil` when the connection
    /// is closed (nothing was called). Never call it holding `inbound`'s lock: the last
    /// user out releases the descriptors, which takes that lock.
    @inline(__always)
    private func withDescriptors<R>(_ body: () -> R) -> R? {
        guard gate.enter() else { return nil }
        defer { if gate.leave() { releaseDescriptors() } }
        return body()
    }

    /// Makes `call` on the descriptors as a user of them: its value, `closedError` when the
    /// connection is closed (nothing was called), or its errno as the failure of `operation`.
    private func usingDescriptors<T>(_ operation: String, _ call: () throws(Errno) -> T) throws(PortError) -> T {
        switch withDescriptors({ Result { () throws(Errno) -> T in try call() } }) {
        case .none: throw closedError
        case .failure(let error)?: throw PortError(operation, error)
        case .success(let value)?: return value
        }
    }

    /// Releases the descriptors, once: the connection is closed and no one uses them.
    private func releaseDescriptors() {
        guard let work = release.withLock({ $0.take() }) else { return }
        let pending = inbound.withLock { state in
            defer { state.descriptors = [] }
            return state.descriptors
        }
        work(pending)
    }

    /// Runs `handler` once when the connection closes (at once if it is closed already).
    func onClose(_ handler: @escaping @Sendable (PortError) -> Void) {
        let closedAlready = life.withLock { life -> Bool in
            if life.open { life.closedHandlers.append(handler) }
            return !life.open
        }
        if closedAlready { handler(replies.withLock { $0.failure } ?? .peerDied) }
    }

    // MARK: Writing

    /// Writes one frame with its descriptors before `deadline`; returns true when it had to
    /// wait (for another writer, or for room).
    ///
    /// The deadline covers waiting for the writer token and for room before the first byte.
    /// Once part of a frame is out it must be finished (a half frame would corrupt the
    /// stream): the rest gets a grace period, after which the connection is closed.
    @discardableResult
    func write(_ frame: UnsafeRawBufferPointer, descriptors: [CInt], deadline: ContinuousClock.Instant?) throws(PortError) -> Bool {
        try write(frame, descriptors: descriptors, deadline: { deadline })
    }

    /// `write(_:descriptors:deadline:)` with the deadline asked for only if the write has
    /// to wait (the usual write reads no clock).
    @discardableResult
    func write(
        _ frame: UnsafeRawBufferPointer, descriptors: [CInt], deadline lazyDeadline: () -> ContinuousClock.Instant?
    ) throws(PortError) -> Bool {
        guard isOpen else { throw closedError }
        if !descriptors.isEmpty && !carriesDescriptors { throw .descriptorsNeedASocket }
        // The usual case in one lock hold: the token is free and the whole frame goes out in
        // one non-blocking write, made while holding the lock (other writers wait for the
        // length of one system call). Only otherwise is the token taken for the slow path.
        var first: Result<Int, Errno>?
        var closed = false
        let done = writing.withLock { busy -> Bool in
            if busy { return false }
            guard let result = withDescriptors({ writeSome(frame, descriptors: descriptors) }) else {
                closed = true
                return false
            }
            if case .success(let written) = result, written == frame.count { return true }
            first = result
            busy = true
            return false
        }
        if done { return false }
        if closed { throw closedError }
        let deadline = lazyDeadline()
        if first == nil {
            guard Self.claimToken(writing, until: deadline) else { throw .sendTimedOut }
        }
        defer {
            writing.withLock { $0 = false }
            writing.broadcast()
        }
        var offset = 0
        var pending = descriptors
        while offset < frame.count {
            let written = first.take() ?? withDescriptors {
                writeSome(UnsafeRawBufferPointer(rebasing: frame[offset...]), descriptors: pending)
            }
            guard let result = written else { throw closedError }
            switch result {
            case .success(let written):
                offset += written
                pending = []
            case .failure(.wouldBlock):
                let limit = offset == 0 ? deadline : ContinuousClock.now + Self.partialFrameGrace
                let ready = try usingDescriptors("poll") {
                    () throws(Errno) -> CShort in try writeFD.poll(CShort(POLLOUT), timeout: limit.map { $0 - .now })
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
        return true
    }

    /// Writes one frame held in an array; see `write(_:descriptors:deadline:)`.
    func write(_ frame: [UInt8], descriptors: [CInt], deadline: ContinuousClock.Instant?) throws(PortError) {
        // Array.withUnsafeBytes only rethrows untyped errors: carry the typed one out.
        let result = frame.withUnsafeBytes { bytes in
            Result { () throws(PortError) in try write(bytes, descriptors: descriptors, deadline: deadline) }
        }
        _ = try result.get()
    }

    /// Writes `reply` as the reply to request `sequence`. A failure is not reported: the
    /// requester sees its receive timeout, and nothing else can be told.
    func writeReply(_ reply: Message, sequence: UInt64, timeout: Duration) {
        // Reached unretained inside the encoder's closures: the connection's reference count
        // lives in a side table (weak references to it exist), where every retain is slow.
        let unretained = Unmanaged.passUnretained(self)
        _ = try? WireMapping.withFrame(for: reply, kind: .reply, sequence: sequence, limits: limits) {
            (frame, descriptors) throws(PortError) -> Bool in
            // `_withUnsafeGuaranteedRef` only rethrows untyped errors: carry the typed one out.
            try unretained._withUnsafeGuaranteedRef { connection in
                Result { () throws(PortError) -> Bool in
                    try connection.write(frame, descriptors: descriptors) { .now + timeout }
                }
            }.get()
        }
    }

    /// Tells the requester of `sequence` that no reply will come (a `noReply` frame). As
    /// with a reply, a failure is not reported: the requester sees its receive timeout.
    func writeNoReply(sequence: UInt64) {
        guard let frame = try? WireCodec.encode(WireMessage(kind: .noReply, id: 0, sequence: sequence, components: [])) else {
            return
        }
        try? write(frame, descriptors: [], deadline: .now + ReceivePort.replySendTimeout)
    }

    /// One write of what is left of a frame (descriptors go with the first byte).
    private func writeSome(_ rest: UnsafeRawBufferPointer, descriptors: [CInt]) -> Result<Int, Errno> {
        switch medium {
        case .socket(let fd):
            return Result { () throws(Errno) -> Int in try fd.send(rest, descriptors: descriptors) }
        case .pipes(_, let fd):
            return valueOrErrno { portkit_write_nosigpipe(fd.rawValue, rest.baseAddress, rest.count) }
        }
    }

    /// Takes a busy/free token, waiting for it until `deadline`; false on time-out. Tries a
    /// plain lock hold first: the token is usually free, and that path costs a fraction of a
    /// condition wait (whose generic result needs a metadata lookup on every call).
    static func claimToken(_ token: ConditionLock<Bool>, until deadline: ContinuousClock.Instant?) -> Bool {
        let free = token.withLock { busy -> Bool in
            if busy { return false }
            busy = true
            return true
        }
        return free || token.wait(until: deadline, { busy -> Bool? in
            if busy { return nil }
            busy = true
            return true
        }) != nil
    }

    /// How long the rest of a frame may take once its first byte is written.
    static let partialFrameGrace: Duration = .seconds(10)

    // MARK: The peer's limit

    /// Tells the peer the largest message this side's port accepts (a header-only `limits`
    /// frame), so that it refuses larger ones itself, with `messageTooLarge`, instead of
    /// sending them and losing the connection. Written when a port takes the connection,
    /// so it is the first frame the peer reads from a fresh one.
    func announceLimit(_ maxMessageBytes: Int) {
        guard let frame = try? WireCodec.encode(WireMessage(kind: .limits, id: UInt32(clamping: maxMessageBytes), components: [])) else {
            return
        }
        try? write(frame, descriptors: [], deadline: .now + ReceivePort.replySendTimeout)
    }

    /// The limits a message to the peer must keep: this side's, narrowed to the largest
    /// message the peer's port announced. Until the announcement has been read, a message
    /// of more than `announcementLookupBytes` first looks for it at the head of the
    /// incoming stream, where a fresh connection's peer put it, without taking it.
    func outgoingLimits(for message: Message) -> WireLimits {
        var peer = peerMaxMessageBytes.load(ordering: .relaxed)
        if peer == 0, case .socket(let fd) = medium, message.dataByteCount > Self.announcementLookupBytes {
            peer = withDescriptors { lookForAnnouncement(on: fd) } ?? 0
        }
        guard peer > 0, peer < limits.maxMessageBytes else { return limits }
        var narrowed = WireLimits.transport(maxMessageBytes: peer)
        narrowed.maxComponents = limits.maxComponents
        narrowed.maxDescriptors = limits.maxDescriptors
        return narrowed
    }

    /// Below this many bytes a message is sent without looking for the peer's
    /// announcement: a port that accepts less refuses such a message on arrival (closing
    /// the connection), as before it announced.
    static let announcementLookupBytes = 64 * 1024

    /// The peer's announced limit if its `limits` frame is the next thing to read (0 if not).
    private func lookForAnnouncement(on fd: FileDescriptor) -> Int {
        withUnsafeTemporaryAllocation(byteCount: WireLayout.headerSize, alignment: 8) { buffer -> Int in
            guard let count = try? fd.peek(into: buffer), count == WireLayout.headerSize,
                let header = try? WireHeader.parse(UnsafeRawBufferPointer(buffer), limits: limits), header.kind == .limits
            else {
                return peerMaxMessageBytes.load(ordering: .relaxed)
            }
            peerMaxMessageBytes.store(Int(header.id), ordering: .relaxed)
            return Int(header.id)
        }
    }

    // MARK: Reading

    /// What to do with each complete message read.
    enum Delivery {
        case reply(UInt64, Message)
        case incoming(WireKind, UInt64, Message)
        case adopt(FileDescriptor)
        /// The peer's port accepts messages of up to this many bytes.
        case limits(Int)
        /// The request with this sequence number gets no reply.
        case refused(UInt64)
    }

    /// The deliveries of one read: the first inline (a read usually brings one frame), the
    /// others in an array made only when there are others.
    private struct Deliveries {
        var first: Delivery?
        var rest: [Delivery] = []

        mutating func append(_ delivery: Delivery) {
            if case .none = first, rest.isEmpty { first = delivery } else { rest.append(delivery) }
        }

        /// Hands each delivery to `deliver`, in order, and empties the batch (keeping the
        /// array's capacity).
        mutating func drain(_ deliver: (Delivery) -> Void) {
            guard let head = first.take() else { return }
            deliver(head)
            guard !rest.isEmpty else { return }
            for index in rest.indices { deliver(rest[index]) }
            rest.removeAll(keepingCapacity: true)
        }
    }

    /// What one read came to.
    private enum ReadOutcome {
        /// Nothing was there to read (or, for a waiting read, nothing came in time).
        case empty
        /// Nothing more to read now.
        case drained
        /// The buffer was filled: there may be more.
        case more
        /// The peer closed or the stream broke: close the connection with this reason.
        case closed(PortError)
    }

    /// How a run of reads ended.
    private enum ReadEnd {
        /// The first read found nothing: nothing was delivered.
        case nothingArrived
        /// Frames (or parts of one) were read, and nothing more is there now.
        case drained
        /// The peer closed or the stream broke; the connection is closed.
        case closed
    }

    /// Reads what is available and turns it into deliveries, handed to `deliver` outside
    /// every lock. The reads never block, except the first when `waitingFirst` (only after
    /// `prepareWaitingReads()` returned true): it waits up to the socket's receive timeout.
    /// On `.closed`, the frames before the break were delivered.
    private func readAvailable(maxChunks: Int, waitingFirst: Bool = false, _ deliver: (Delivery) -> Void) -> ReadEnd {
        var batch = Deliveries()
        defer {
            // The array of a many-frame read goes back for the next one.
            if batch.rest.capacity > 0 {
                inbound.withLock { state in
                    if state.spareDeliveries.capacity < batch.rest.capacity { swap(&state.spareDeliveries, &batch.rest) }
                }
            }
        }
        for chunk in 0..<maxChunks {
            let waiting = waitingFirst && chunk == 0
            let outcome = withDescriptors {
                inbound.withLock { state in readOnce(&state, into: &batch, waiting: waiting) }
            } ?? .closed(closedError)
            batch.drain(deliver)
            switch outcome {
            case .more: continue
            case .empty: return chunk == 0 ? .nothingArrived : .drained
            case .drained: return .drained
            case .closed(let reason):
                close(reason)
                return .closed
            }
        }
        return .drained
    }

    /// Makes the socket ready for waiting reads, once: blocking (every other read and write
    /// passes `MSG_DONTWAIT`, so only a waiting read ever blocks), with `directWaitSlice`
    /// as its receive timeout. False for pipes, or when the socket refused.
    private func prepareWaitingReads() -> Bool {
        let known = waitingReads.load(ordering: .acquiring)
        if known != WaitingReads.unknown { return known == WaitingReads.ready }
        return withDescriptors { inbound.withLock { _ in
            let known = waitingReads.load(ordering: .acquiring)
            if known != WaitingReads.unknown { return known == WaitingReads.ready }
            var ready = false
            if case .socket(let fd) = medium {
                // Either call failing leaves the socket non-blocking (the flag is cleared
                // last, in one fcntl), so a refusal needs no undoing.
                do throws(Errno) {
                    try fd.setReceiveTimeout(microseconds: Int(Self.sliceMilliseconds) * 1000)
                    try fd.setNonBlocking(false)
                    ready = true
                } catch {}
            }
            waitingReads.store(ready ? WaitingReads.ready : WaitingReads.unavailable, ordering: .releasing)
            return ready
        } } ?? false
    }

    /// One read, and the frames it completes decoded into `batch`. Frames that lie whole in
    /// the read buffer are decoded from it directly (no copy, the header parsed once); only
    /// a frame split across reads goes through the splitter.
    private func readOnce(_ state: inout Inbound, into batch: inout Deliveries, waiting: Bool) -> ReadOutcome {
        let buffer: UnsafeMutableRawBufferPointer
        if let kept = state.buffer {
            buffer = kept
        } else {
            buffer = .allocate(byteCount: Self.readChunk, alignment: 16)
            state.buffer = buffer
        }
        let got = withUnsafeTemporaryAllocation(of: CInt.self, capacity: Self.maxReceivedDescriptors) { fds -> Result<Int, Errno> in
            switch medium {
            case .socket(let fd):
                let received: (count: Int, descriptors: Int, truncated: Bool, sender: (pid: pid_t, uid: uid_t, gid: gid_t)?)
                do throws(Errno) { received = try fd.receive(into: buffer, descriptors: fds, waiting: waiting) } catch {
                    return .failure(error)
                }
                if let sender = received.sender {
                    state.sender = SenderCredentials(pid: sender.pid, uid: sender.uid, gid: sender.gid)
                }
                if received.descriptors > 0 {
                    state.descriptors.append(contentsOf: UnsafeBufferPointer(rebasing: fds[..<received.descriptors]))
                }
                return .success(received.count)
            case .pipes(let fd, _):
                return Result { () throws(Errno) -> Int in try fd.read(into: buffer) }
            }
        }
        let count: Int
        switch got {
        case .success(let bytes): count = bytes
        case .failure(.wouldBlock): return .empty
        case .failure(let error): return .closed(PortError(connection: "receive", error))
        }
        if count == 0 { return .closed(.peerDied) }
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[..<count])
        if batch.rest.capacity == 0 && state.spareDeliveries.capacity > 0 {
            swap(&batch.rest, &state.spareDeliveries)
        }
        do throws(PortError) {
            if state.splitter.bufferedByteCount == 0 {
                var offset = 0
                while offset < count {
                    let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                    guard let header = try parseHeader(rest), header.frameLength <= rest.count else { break }
                    let frame = UnsafeRawBufferPointer(rebasing: rest[..<header.frameLength])
                    batch.append(try decode(frame, header, takingFrom: &state.descriptors, sender: state.sender))
                    offset += header.frameLength
                }
                // A frame begun but not ended waits in the splitter for the next read.
                if offset < count { state.splitter.append(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
            } else {
                state.splitter.append(bytes)
                while let frame = try nextFrame(&state.splitter) {
                    let result = frame.withUnsafeBytes { raw in
                        Result { () throws(PortError) -> Delivery in
                            guard let header = try parseHeader(raw) else { throw .malformed("a split frame without its header") }
                            return try decode(raw, header, takingFrom: &state.descriptors, sender: state.sender)
                        }
                    }
                    batch.append(try result.get())
                }
            }
        } catch {
            return .closed(error)
        }
        return count < buffer.count ? .drained : .more
    }

    private func parseHeader(_ bytes: UnsafeRawBufferPointer) throws(PortError) -> WireHeader? {
        do { return try WireHeader.parse(bytes, limits: limits) } catch { throw .malformed(error.description) }
    }

    private func nextFrame(_ splitter: inout WireFrameSplitter) throws(PortError) -> [UInt8]? {
        do { return try splitter.nextFrame() } catch { throw .malformed(error.description) }
    }

    /// Decodes one whole frame whose header is parsed, taking the descriptors it announces
    /// from the front of `pending` (descriptors arrive in frame order).
    private func decode(
        _ frame: UnsafeRawBufferPointer, _ header: WireHeader, takingFrom pending: inout [CInt], sender: SenderCredentials?
    ) throws(PortError) -> Delivery {
        let count = header.descriptorCount
        guard count <= pending.count else {
            throw .malformed("frame announces \(count) descriptors, \(pending.count) arrived")
        }
        var descriptors: [CInt] = []
        if count > 0 {
            descriptors = Array(pending.prefix(count))
            pending.removeFirst(count)
        }
        let limits = self.limits
        let components: [MessageComponent]
        do throws(WireError) {
            if descriptors.isEmpty {
                // Bytes only (the usual frame): components made as they are read.
                components = try WireCodec.decodeComponents(frame, header: header, descriptorCount: 0) {
                    WireMapping.component(from: $0, descriptors: [], limits: limits)
                }
            } else {
                // Descriptors are taken over only once the whole frame has proved valid.
                let wire = try WireCodec.decodeComponents(frame, header: header, descriptorCount: descriptors.count) { $0 }
                if header.kind == .adoptConnection {
                    if descriptors.count == 1 { return .adopt(FileDescriptor(rawValue: descriptors[0])) }
                    components = []
                } else {
                    components = wire.map { WireMapping.component(from: $0, descriptors: descriptors, limits: limits) }
                }
            }
        } catch {
            for fd in descriptors { Glibc.close(fd) }
            throw .malformed(error.description)
        }
        if header.kind == .adoptConnection {
            for fd in descriptors { Glibc.close(fd) }
            throw .malformed("adopt-connection frame without exactly one descriptor")
        }
        if header.kind == .limits || header.kind == .noReply {
            guard components.isEmpty, descriptors.isEmpty else {
                for fd in descriptors { Glibc.close(fd) }
                throw .malformed("a \(header.kind) frame carries nothing but its header")
            }
            return header.kind == .limits ? .limits(Int(header.id)) : .refused(header.sequence)
        }
        let replyPort = header.replyPort.map { WireMapping.sendPort(descriptors[$0], limits: limits) }
        var message = Message(id: header.id, components: components, replyPort: replyPort)
        message.sender = sender
        return header.kind == .reply ? .reply(header.sequence, message) : .incoming(header.kind, header.sequence, message)
    }

    /// Called by the loop when a bound connection is readable.
    fileprivate func loopCanRead() {
        let handler = life.withLock { $0.handler }
        _ = readAvailable(maxChunks: 16) { delivery in deliver(delivery, handler: handler) }
    }

    /// Hands a delivery to the bound port's `handler` (`nil` once the connection is no
    /// longer bound: then it is dropped, its descriptors closed); replies go to their
    /// waiter. The port itself is reached only for a check-in or an adopted connection.
    private func deliver(_ delivery: Delivery, handler: ReceivePort.Handler?) {
        switch delivery {
        case .reply(let sequence, let message): complete(sequence, with: .success(message))
        case .refused(let sequence): complete(sequence, with: .failure(.noReply))
        case .incoming(let kind, let sequence, let message):
            guard let handler else { return discard(message) }
            ReceivePort.receive(message, kind: kind, sequence: sequence, from: self, handler: handler) {
                self.life.withLock { $0.port }
            }
        case .adopt(let socket):
            if let port = life.withLock({ $0.port }) { try? port.adoptConnection(socket) } else { try? socket.close() }
        case .limits(let bytes):
            peerMaxMessageBytes.store(bytes, ordering: .relaxed)
        }
    }

    private func complete(_ sequence: UInt64, with result: Result<Message, PortError>) {
        let taken = replies.withLock { $0.complete(sequence, with: result) }
        if taken { replies.broadcast() } else if case .success(let message) = result { discard(message) }
    }

    /// Closes the descriptors of a message no one will receive.
    private func discard(_ message: Message) {
        for fd in message.descriptors { Glibc.close(fd) }
    }

    // MARK: Requests

    /// Registers one request, whose reply is matched to it by the sequence number returned;
    /// any number may be in flight at once. `endRequest(_:)` forgets it.
    func beginRequest() -> UInt64 {
        replies.withLock { $0.begin() }
    }

    /// Forgets request `sequence`: a reply that came too late is dropped (its descriptors
    /// closed), and one still to come will be.
    func endRequest(_ sequence: UInt64) {
        let late = replies.withLock { $0.end(sequence) }
        if case .success(let message) = late { discard(message) }
    }

    /// How long a request waits on its connection alone, when its thread's loop reads the
    /// connection, before that loop serves its other work again. On a socket the wait is
    /// a read with this receive timeout, which the kernel rounds up to whole clock ticks:
    /// up to 4 ms on a 250 Hz kernel (its timer wheel is what makes the wait cheap).
    static let directWaitSlice: Duration = .milliseconds(1)
    private static let sliceMilliseconds = milliseconds(directWaitSlice)

    /// `duration` in whole milliseconds for `poll`, rounded up (so a wait never ends
    /// early and spins), at least 0, at most a day; integer arithmetic only.
    static func milliseconds(_ duration: Duration) -> CInt {
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
        if seconds >= 86_400 { return 86_400_000 }
        let perMillisecond: Int64 = 1_000_000_000_000_000
        return CInt(seconds * 1000 + (attoseconds + perMillisecond - 1) / perMillisecond)
    }

    /// Waits for the reply to `sequence` until `deadline`.
    ///
    /// On a connection another thread's loop reads, that loop hands the reply over. When
    /// this thread reads it itself (an unbound connection, or one bound to this thread's
    /// loop), it waits on the connection's descriptor and reads it. Bound to this thread's
    /// loop, that direct wait lasts about `directWaitSlice` (like CFMessagePortSendRequest's
    /// private reply mode, but short): a reply later than that is waited for by running
    /// the loop, which serves its other work (timers, blocks, other ports) meanwhile, as
    /// before. Frames other than the reply still reach the bound port's handler (an
    /// unbound connection has none: they are dropped).
    ///
    /// The wait ends at `sent + timeout` (`timeout` nil: never).
    func awaitReply(_ sequence: UInt64, sent: ContinuousClock.Instant, timeout: Duration?) throws(PortError) -> Message {
        let deadline = timeout.map { sent + $0 }
        // A waiting read's timeout, rounded up to clock ticks, must not overshoot the deadline.
        let mayWaitReading = timeout.map { $0 > Self.waitingReadMargin } ?? true
        // Neither the port nor the loop is retained here: both have side-table reference
        // counts (weak references to them exist), which make every retain a slow one.
        let (bound, onLoopThread) = life.withLock { ($0.handler != nil, $0.loop?.isCurrent ?? false) }
        guard bound else { return try awaitReplyReading(sequence, deadline: deadline, mayWaitReading: mayWaitReading) }
        if onLoopThread {
            if let reply = try awaitReplyDirectly(sequence, deadline: deadline, mayWaitReading: mayWaitReading) { return reply }
            // Slow: run the loop (its source reads the connection) until the reply is in.
            guard let loop = life.withLock({ $0.loop }), loop.isCurrent else {
                return try awaitReplyReading(sequence, deadline: deadline, mayWaitReading: false)
            }
            let mode = loop.currentMode ?? .default
            while replies.withLock({ $0.outcome(sequence, peek: true) == nil }), deadline.map({ ContinuousClock.now < $0 }) ?? true {
                _ = try? loop.run(mode: mode, until: deadline ?? .now + .seconds(3600), returnAfterSourceHandled: true)
            }
        }
        let outcome = replies.wait(until: deadline) { table in table.outcome(sequence) }
        guard let outcome else { throw .receiveTimedOut }
        return try outcome.get()
    }

    /// The first `directWaitSlice` of a wait on a connection bound to this thread's loop:
    /// waits on the descriptor alone and reads it here. The usual round trip ends here
    /// with two lock holds, no clock reading and, on a socket, one system call: a read that
    /// waits up to the socket's receive timeout (a kernel timer-wheel timeout, rounded up
    /// to whole clock ticks), where a `poll` then a read cost a second call and a
    /// high-resolution timer armed and cancelled per round trip. `nil`: no reply yet.
    private func awaitReplyDirectly(
        _ sequence: UInt64, deadline: ContinuousClock.Instant?, mayWaitReading: Bool
    ) throws(PortError) -> Message? {
        var reply: Message?
        var handler: ReceivePort.Handler??
        let waitingReads = mayWaitReading && prepareWaitingReads()
        // The slice is one waiting read (or one poll: its granularity is a millisecond,
        // rounded up), unless other frames arrive first (then the clock ends it).
        let sliceMilliseconds = Self.sliceMilliseconds
        var sliceEnd: ContinuousClock.Instant?
        while true {
            if !waitingReads {
                if try pollReadable(milliseconds: sliceMilliseconds) == 0 { return nil }  // the slice is over
            }
            let end = readAvailable(maxChunks: 64, waitingFirst: waitingReads) { delivery in
                if case .reply(sequence, let message) = delivery, case .none = reply {
                    reply = message
                    return
                }
                if handler == nil { handler = .some(life.withLock { $0.handler }) }
                deliver(delivery, handler: handler ?? nil)
            }
            if let reply {
                // Taken here, not through the table: this thread is the connection's reader.
                return reply
            }
            if waitingReads && end == .nothingArrived { return nil }  // the slice is over
            if end == .closed, let failure = replies.withLock({ $0.failure }) { throw failure }
            // Other frames came first (or a nested run took the reply): the slice goes on,
            // by the clock now, so a chatty peer cannot keep the loop waiting.
            if let outcome = replies.withLock({ $0.outcome(sequence) }) { return try outcome.get() }
            let now = ContinuousClock.now
            if let deadline, now >= deadline { throw .receiveTimedOut }
            if let end = sliceEnd, now >= end { return nil }
            if sliceEnd == nil { sliceEnd = now + Self.directWaitSlice }
        }
    }

    /// Waits for the reply on an unbound connection, which its requester reads: first with
    /// one waiting read (as the direct wait does), then with `poll` until the deadline.
    private func awaitReplyReading(
        _ sequence: UInt64, deadline: ContinuousClock.Instant?, mayWaitReading: Bool
    ) throws(PortError) -> Message {
        func take(_ delivery: Delivery) {
            switch delivery {
            case .reply(let sequence, let message): complete(sequence, with: .success(message))
            case .refused(let sequence): complete(sequence, with: .failure(.noReply))
            case .incoming(_, _, let message): discard(message)  // nothing receives here
            case .adopt(let socket): try? socket.close()
            case .limits(let bytes): peerMaxMessageBytes.store(bytes, ordering: .relaxed)
            }
        }
        /// What a waiter does next.
        enum Turn {
            case done(Result<Message, PortError>)
            case read
        }
        var waitFirst = mayWaitReading && prepareWaitingReads()
        while true {
            // The reply, or the reader's part (one thread reads for every waiter; the others
            // wait to be handed their replies, or the part when the reader leaves).
            let turn = replies.wait(until: deadline) { table -> Turn? in
                if let outcome = table.outcome(sequence) { return .done(outcome) }
                if table.readerActive { return nil }
                table.readerActive = true
                return .read
            }
            switch turn {
            case .none: throw .receiveTimedOut
            case .done(let outcome)?: return try outcome.get()
            case .read?: break
            }
            let read = Result { () throws(PortError) in
                if waitFirst {
                    waitFirst = false
                    _ = readAvailable(maxChunks: 64, waitingFirst: true, take)
                    return
                }
                var milliseconds: CInt = -1
                if let deadline {
                    let now = ContinuousClock.now
                    if now >= deadline { throw .receiveTimedOut }
                    milliseconds = Self.milliseconds(deadline - now)
                }
                if try pollReadable(milliseconds: milliseconds) != 0 { _ = readAvailable(maxChunks: 64, take) }
            }
            replies.withLock { $0.readerActive = false }
            replies.broadcast()
            try read.get()
        }
    }

    /// Waits up to `milliseconds` (-1: for ever) for the connection to be readable; the
    /// ready events, or 0.
    private func pollReadable(milliseconds: CInt) throws(PortError) -> CShort {
        try usingDescriptors("poll") { () throws(Errno) -> CShort in try readFD.poll(CShort(POLLIN), milliseconds: milliseconds) }
    }

    /// The least receive timeout for which a wait begins with a waiting read: more than
    /// the read's own timeout (`directWaitSlice`) rounded up to a tick of a 100 Hz kernel.
    static let waitingReadMargin: Duration = .milliseconds(20)

    // MARK: Binding and closing

    /// Binds the connection to a receive port: a descriptor source on the port's loop, in
    /// its modes, reads frames and hands them to the port.
    func bind(to port: ReceivePort, loop: ThreadLoop, modes: [LoopMode], handler: ReceivePort.Handler) throws(PortError) {
        // A strong capture, not a weak one: a weak reference anywhere moves the connection's
        // reference count to a side table, where every retain and release on the message
        // path is a slow one. The cycle (connection → source → this closure → connection)
        // is broken by `close`, which a bound connection always gets: from its port's
        // invalidation (the port holds its connections and invalidates in its deinit), its
        // peer's end, or its send port's invalidation.
        // A user of the descriptor until its source is handed to the loop: a close meanwhile
        // leaves the number registered to no one else.
        guard gate.enter() else { throw closedError }
        defer { if gate.leave() { releaseDescriptors() } }
        let target = ReadTarget(connection: self)
        let source = DescriptorSource(descriptor: readFD.rawValue, events: .readable) { _, _ in
            target.connection.loopCanRead()
        }
        let stillOpen = life.withLock { life -> Bool in
            guard life.open else { return false }
            life.port = port
            life.handler = handler
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
        let duplicate = try usingDescriptors("dup") { () throws(Errno) -> FileDescriptor in try readFD.duplicate() }
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

    /// What a bound connection's read source holds: the connection, strongly, in an object of
    /// its own. Calling the source's handler retains its context; were the context the
    /// connection itself, it would be retained through its side-table count, a slow retain and
    /// release per readable pass.
    private final class ReadTarget: Sendable {
        let connection: Connection
        init(connection: Connection) { self.connection = connection }
    }

    /// A hang-up watcher: its source, its loop, and the duplicate descriptor it watches.
    struct Watcher {
        let loop: ThreadLoop
        let source: DescriptorSource
        let descriptor: FileDescriptor
    }

    /// Closes the connection once: waiters fail with `reason` (recorded before any writer can
    /// see the connection closed, so a send racing the peer's death fails with `peerDied`),
    /// the bound source is removed, close handlers run, and the descriptors are closed by the
    /// last thread using them (on the bound loop's thread, after its source is removed, so a
    /// reused descriptor number is never deregistered or written to by mistake).
    func close(_ reason: PortError) {
        let taken = life.withLock { life -> (DescriptorSource?, ThreadLoop?, [@Sendable (PortError) -> Void], [Watcher])? in
            guard life.open else { return nil }
            replies.withLock { table in if table.failure == nil { table.failure = reason } }
            let result = (life.source, life.loop, life.closedHandlers, life.watchers)
            life.open = false
            openFlag.store(false, ordering: .releasing)
            life.source = nil
            life.port = nil
            life.handler = nil
            life.closedHandlers = []
            life.watchers = []
            return result
        }
        guard let (source, loop, handlers, watchers) = taken else { return }
        for watcher in watchers {
            Self.onLoopThread(watcher.loop) {
                watcher.source.invalidate()
                try? watcher.descriptor.close()
            }
        }
        replies.broadcast()
        if let source {
            if let loop { Self.onLoopThread(loop) { source.invalidate() } } else { source.invalidate() }
        }
        let medium = self.medium
        let finish: @Sendable ([CInt]) -> Void = { pending in
            // Again, in case the last user was the loop's own thread, ahead of the block above.
            source?.invalidate()
            switch medium {
            case .socket(let fd): try? fd.close()
            case .pipes(let read, let write): try? read.close(); try? write.close()
            }
            for fd in pending { Glibc.close(fd) }
        }
        var releasing = finish
        if let loop { releasing = { pending in Self.onLoopThread(loop) { finish(pending) } } }
        release.withLock { [releasing] in $0 = releasing }
        // Wake any thread blocked on the socket (a writer waiting for room, a reader), then
        // close the gate: the last user out, maybe this call, releases the descriptors.
        _ = withDescriptors {
            writeFD.shutdown()
            _ = gate.close()
        }
        for handler in handlers { handler(reason) }
    }

    /// Runs `work` on `loop`'s thread (now, if that is this thread; inline if the loop has
    /// ended, when nothing can race with it any more).
    static func onLoopThread(_ loop: ThreadLoop, _ work: @escaping @Sendable () -> Void) {
        if loop.isCurrent || (try? loop.perform(label: "close connection", work)) == nil { work() }
    }

    deinit {
        close(.invalidPort)
        inbound.withLock { $0.buffer?.deallocate() }
    }
}
