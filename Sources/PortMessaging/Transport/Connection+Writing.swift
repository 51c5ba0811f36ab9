import Glibc
import PermanentThread
import PortKitSystem
import PortKitLocks

extension Connection {
    // MARK: Frames out

    /// Writes one frame with its descriptors before `deadline`; returns true when it had to
    /// wait (for another writer, or for room) or was queued.
    ///
    /// The deadline covers waiting for the writer token and for room before the first byte.
    /// Once part of a frame is out it must be finished (a half frame would corrupt the
    /// stream): the rest gets a grace period, after which the connection is closed.
    ///
    /// On the thread of a running loop the write never waits for room: what the socket does
    /// not take at once is queued (`Outbox`) and written from that loop as the socket
    /// drains, up to `queueLimit`; past that it waits like any other write (a zero
    /// timeout fails at once with `sendTimedOut`). The rest of a frame already begun always
    /// queues.
    @discardableResult
    func write(_ frame: UnsafeRawBufferPointer, descriptors: [CInt], deadline: ContinuousClock.Instant?) throws(PortError) -> Bool {
        try write(FrameBytes(frame), descriptors: descriptors, deadline: { deadline })
    }

    /// `write(_:descriptors:deadline:)` with the deadline asked for only if the write has
    /// to wait (the usual write reads no clock), of a frame in one or two parts.
    @discardableResult
    func write(
        _ frame: FrameBytes, descriptors: [CInt], deadline lazyDeadline: () -> ContinuousClock.Instant?
    ) throws(PortError) -> Bool {
        guard isOpen else { throw closedError }
        if !descriptors.isEmpty && !carriesDescriptors { throw medium.refusal("a port or file descriptor") }
        passCredentialsBeforeUse()
        // The usual case in one lock hold: the token is free, nothing is queued, and the
        // whole frame goes out in one non-blocking write, made while holding the lock (other
        // writers wait for the length of one system call). Only otherwise is the token taken
        // for the slow path.
        var first: Result<Int, Errno>?
        var closed = false
        var holding = false
        let done = writing.withLock { busy -> Bool in
            if busy { return false }
            if queuedBytes.load(ordering: .relaxed) > 0 {
                busy = true
                holding = true
                return false
            }
            guard let result = withDescriptors({ medium.writeSome(frame, descriptors: descriptors) }) else {
                closed = true
                return false
            }
            if case .success(let written) = result, written == frame.count { return true }
            first = result
            busy = true
            holding = true
            return false
        }
        if done { return false }
        if closed { throw closedError }
        let deadline = lazyDeadline()
        if !holding {
            guard Self.claimToken(writing, until: deadline) else { throw .sendTimedOut }
        }
        defer {
            writing.withLock { $0 = false }
            writing.broadcast()
        }
        var offset = 0
        var pending = descriptors
        while offset < frame.count {
            // What was queued before goes first.
            let queueEmpty = try flushQueued()
            let written: Result<Int, Errno>?
            if let result = first.take() {
                written = result
            } else if queueEmpty {
                written = withDescriptors { medium.writeSome(frame.dropping(offset), descriptors: pending) }
            } else {
                written = .failure(.wouldBlock)
            }
            guard let result = written else { throw closedError }
            switch result {
            case .success(let written):
                offset += written
                pending = []
            case .failure(.wouldBlock):
                let rest = frame.dropping(offset)
                if let loop = ThreadLoop.running,
                   offset > 0 || queuedBytes.load(ordering: .relaxed) + rest.count <= queueLimit.load(ordering: .relaxed) {
                    try enqueue(rest, descriptors: pending, flushingOn: loop)
                    return true
                }
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
                if failure == .peerDied {
                    peerGoneOnWrite()
                    // A listening port that refused this process wrote why before it closed.
                    if case .refusedByPeer = closedError { throw closedError }
                }
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

    /// Writes `reply` as the reply to request `sequence`, or throws (nothing written) when
    /// it cannot be encoded or written within `timeout`.
    func sendReply(_ reply: Message, sequence: UInt64, timeout: Duration) throws(PortError) {
        // Reached unretained inside the encoder's closures: the connection's reference count
        // lives in a side table (weak references to it exist), where every retain is slow.
        let unretained = Unmanaged.passUnretained(self)
        _ = try WireMapping.withFrame(for: reply, kind: .reply, sequence: sequence, limits: outgoingLimits(for: reply)) {
            (frame, descriptors) throws(PortError) -> Bool in
            // `_withUnsafeGuaranteedRef` only rethrows untyped errors: carry the typed one out.
            try unretained._withUnsafeGuaranteedRef { connection in
                Result { () throws(PortError) -> Bool in
                    try connection.write(frame, descriptors: descriptors) { .now + timeout }
                }
            }.get()
        }
    }

    /// Tells the requester of `sequence` that no reply will come (a `noReply` frame, whose id
    /// is the `NoReplyReason`). As with a reply, a failure is not reported: the requester
    /// sees its receive timeout.
    func writeNoReply(sequence: UInt64, reason: UInt32 = NoReplyReason.unanswered) {
        guard let frame = try? WireCodec.encode(WireMessage(kind: .noReply, id: reason, sequence: sequence, components: [])) else {
            return
        }
        try? write(frame, descriptors: [], deadline: .now + ReceivePort.replySendTimeout)
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
    /// - Throws: `.cannotCrossHosts` when the message carries what cannot travel on this
    ///   connection (`checkCanTravel`).
    func outgoingLimits(for message: Message) throws(PortError) -> WireLimits {
        try checkCanTravel(message)
        var peer = peerMaxMessageBytes.load(ordering: .relaxed)
        if peer == 0, let fd = medium.plainSocket, message.dataByteCount > Self.announcementLookupBytes {
            peer = withDescriptors { lookForAnnouncement(on: fd) } ?? 0
        }
        // What this side accepts does not bound what it sends: a port that takes only small
        // requests may answer with large replies, up to what the peer's port accepts.
        var narrowed = WireLimits.transport(maxMessageBytes: peer > 0 ? peer : ReceivePort.defaultMaxMessageBytes)
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
}
