import Glibc
import PermanentThread
import PortKitSystem

extension Connection {
    // MARK: Frames in

    /// The size of a thread's read buffer (`ThreadReadBuffer`): the most one read takes.
    static let readChunk = 256 * 1024

    /// What to do with each complete message read.
    enum Delivery {
        case reply(UInt64, Message)
        case incoming(WireKind, UInt64, Message)
        case adopt(FileDescriptor)
        /// The peer's port accepts messages of up to this many bytes.
        case limits(Int)
        /// The request with this sequence number gets no reply, for this reason (`noReply`,
        /// or `receiverOutOfDescriptors`).
        case refused(UInt64, PortError)
        /// A frame of this kind (and sequence number) whose descriptors this side could not
        /// receive (its table was full): a request or a reply, or an adopted connection.
        case undelivered(WireKind, UInt64)
    }

    /// The deliveries of one read: the first inline (a read usually brings one frame), the
    /// others in an array made only when there are others.
    private struct Deliveries {
        var first: Delivery?
        var rest: [Delivery] = []

        mutating func append(_ delivery: consuming Delivery) {
            if case .none = first, rest.isEmpty { first = consume delivery } else { rest.append(consume delivery) }
        }

        /// Hands each delivery to `deliver`, in order, and empties the batch (keeping the
        /// array's capacity).
        mutating func drain(_ deliver: (consuming Delivery) -> Void) {
            guard let head = first.take() else { return }
            deliver(head)
            guard !rest.isEmpty else { return }
            rest.withUnsafeMutableBufferPointer { items in
                guard let base = items.baseAddress else { return }
                for index in items.indices {
                    // Moved out, a payload-free case left in its place: each delivery is
                    // handed over without a copy of what it carries (a retain and a
                    // release of each of its references).
                    let delivery = (base + index).move()
                    (base + index).initialize(to: .limits(0))
                    deliver(delivery)
                }
            }
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
    enum ReadEnd {
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
    /// On `.closed`, the frames before the break were delivered. `stop` is asked after each
    /// read that filled the buffer: true ends the run there (what is left stays unread).
    func readAvailable(
        maxChunks: Int, waitingFirst: Bool = false, until stop: () -> Bool = { false }, _ deliver: (consuming Delivery) -> Void
    ) -> ReadEnd {
        passCredentialsBeforeUse()
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
            case .more:
                if stop() { return .drained }
                continue
            case .empty: return chunk == 0 ? .nothingArrived : .drained
            case .drained: return .drained
            case .closed(let reason):
                close(reason)
                return .closed
            }
        }
        return .drained
    }

    /// One read, and the frames it completes decoded into `batch`. Frames that lie whole in
    /// the read buffer are decoded from it directly (no copy, the header parsed once); only
    /// a frame split across reads goes through the splitter.
    private func readOnce(_ state: inout Inbound, into batch: inout Deliveries, waiting: Bool) -> ReadOutcome {
        if state.large != nil { return readLarge(&state, into: &batch, waiting: waiting) }
        let buffer = ThreadReadBuffer.current
        let got = medium.readSome(into: buffer, &state, waiting: waiting)
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
                    guard let header = try parseHeader(rest, limits: state.splitter.headerLimits) else { break }
                    guard header.frameLength <= rest.count else {
                        // A large frame begun: read on into storage of its own (not over TLS,
                        // whose reads need a record's room).
                        if header.frameLength >= LargeFrame.threshold, medium.readsInPlace {
                            state.large = LargeFrame(header: header, first: rest)
                            offset = count
                        }
                        break
                    }
                    let frame = UnsafeRawBufferPointer(rebasing: rest[..<header.frameLength])
                    batch.append(try decode(frame, header, takingFrom: &state))
                    state.splitter.noteFrameTaken()
                    offset += header.frameLength
                }
                // A frame begun but not ended waits in the splitter for the next read.
                if offset < count { state.splitter.append(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
            } else {
                state.splitter.append(bytes)
                while let frame = try nextFrame(&state.splitter) {
                    let result = frame.withUnsafeBytes { raw in
                        Result { () throws(PortError) -> Delivery in
                            // Its header was held to the splitter's limits (the first frame's too).
                            guard let header = try parseHeader(raw, limits: state.splitter.limits) else {
                                throw .malformed("a split frame without its header")
                            }
                            return try decode(raw, header, takingFrom: &state)
                        }
                    }
                    batch.append(try result.get())
                }
            }
        } catch {
            return .closed(error)
        }
        return finishRead(&state, filled: count == buffer.count)
    }

    /// One read of a large frame, straight into its storage; the frame decoded once whole.
    private func readLarge(_ state: inout Inbound, into batch: inout Deliveries, waiting: Bool) -> ReadOutcome {
        guard var large = state.large.take() else { return .empty }
        var room = 0
        let got = large.read { into in
            room = into.count
            return medium.readSome(into: into, &state, waiting: waiting)
        }
        let count: Int
        switch got {
        case .success(let bytes): count = bytes
        case .failure(.wouldBlock):
            state.large = large
            return .empty
        case .failure(let error): return .closed(PortError(connection: "receive", error))
        }
        if count == 0 { return .closed(.peerDied) }
        guard large.isComplete else {
            state.large = large
            return finishRead(&state, filled: count == room)
        }
        let (frame, firstPayload) = large.parts()
        do throws(PortError) {
            let delivery = try frame.withUnsafeBytes { raw in
                Result { () throws(PortError) -> Delivery in
                    guard let header = try parseHeader(raw, limits: state.splitter.limits) else {
                        throw .malformed("a large frame without its header")
                    }
                    return try decode(raw, header, takingFrom: &state, firstPayload: firstPayload)
                }
            }.get()
            batch.append(delivery)
            state.splitter.noteFrameTaken()
        } catch {
            return .closed(error)
        }
        return finishRead(&state, filled: true)
    }

    /// What is checked after every read: descriptors no frame claims, and the peer told of
    /// a frame begun and not finished. `filled`: the read took all the room it had.
    private func finishRead(_ state: inout Inbound, filled: Bool) -> ReadOutcome {
        let pending = state.splitter.bufferedByteCount + (state.large?.received ?? 0)
        // Descriptors come with the first byte of the frame that claims them: with no frame
        // begun, any left over were claimed by none (a peer that would make this side hold
        // descriptors for ever).
        if pending == 0 {
            if !state.descriptors.isEmpty {
                return .closed(.malformed("\(state.descriptors.count) descriptors that no frame claims"))
            }
            state.descriptorsDropped = false
        }
        if let peer = state.peer {
            // A frame begun and not finished: its peer knows since when (a server ends a
            // client that leaves one half sent). Told only as that changes.
            if pending > 0 || state.partialNoted {
                peer.notePartialMessage(bytes: pending)
                state.partialNoted = pending > 0
            }
        }
        return filled ? .more : .drained
    }

    /// From now on, frames read are held to `limits` (those of the port that adopted the
    /// connection, which it announced to the peer) rather than the connection's own.
    func takeReadLimits(_ limits: WireLimits) {
        inbound.withLock { $0.splitter.limits = limits }
    }

    private func parseHeader(_ bytes: UnsafeRawBufferPointer, limits: WireLimits) throws(PortError) -> WireHeader? {
        do { return try WireHeader.parse(bytes, limits: limits) } catch { throw .malformed(error.description) }
    }

    private func nextFrame(_ splitter: inout WireFrameSplitter) throws(PortError) -> [UInt8]? {
        do { return try splitter.nextFrame() } catch { throw .malformed(error.description) }
    }

    /// Decodes one whole frame whose header is parsed, taking the descriptors it announces
    /// from the front of `state.descriptors` (descriptors arrive in frame order); the
    /// message names `state`'s sender and peer.
    ///
    /// A frame that finds fewer descriptors than it announces after a read lost some (this
    /// process is out of descriptors) is not delivered: the descriptors it got are closed,
    /// and a request is refused (`receiverOutOfDescriptors`), a reply fails its request, an
    /// adopted connection is dropped (its peer sees it end); a one-way message, which has
    /// no way back, ends the connection with that error. The connection stays otherwise.
    /// `firstPayload`: the first component's bytes, read apart (`LargeFrame`) and cut out
    /// of `frame`, whose first component is then empty.
    private func decode(
        _ frame: UnsafeRawBufferPointer, _ header: WireHeader, takingFrom state: inout Inbound, firstPayload: [UInt8]? = nil
    ) throws(PortError) -> Delivery {
        let count = header.descriptorCount
        guard count <= state.descriptors.count else {
            guard state.descriptorsDropped else {
                throw .malformed("frame announces \(count) descriptors, \(state.descriptors.count) arrived")
            }
            FileDescriptor.close(state.descriptors)
            state.descriptors.removeAll()
            switch header.kind {
            case .request, .reply, .adoptConnection: return .undelivered(header.kind, header.sequence)
            default: throw .receiverOutOfDescriptors
            }
        }
        var descriptors: [CInt] = []
        if count > 0 {
            descriptors = Array(state.descriptors.prefix(count))
            state.descriptors.removeFirst(count)
        }
        let limits = self.limits
        var parts: MessageParts
        do throws(WireError) {
            if descriptors.isEmpty, let payload = WireCodec.singleBytesPayload(frame, header: header) {
                // The usual frame: its one component made without an array of components.
                parts = MessageParts(.data([UInt8](payload)))
            } else if descriptors.isEmpty {
                // Bytes only: components made as they are read.
                parts = MessageParts(try WireCodec.decodeComponents(frame, header: header, descriptorCount: 0) {
                    WireMapping.component(from: $0, descriptors: [], limits: limits)
                })
            } else {
                // Descriptors are taken over only once the whole frame has proved valid.
                let wire = try WireCodec.decodeComponents(frame, header: header, descriptorCount: descriptors.count) { $0 }
                if header.kind == .adoptConnection {
                    if descriptors.count == 1 { return .adopt(FileDescriptor(rawValue: descriptors[0])) }
                    parts = MessageParts()
                } else {
                    parts = MessageParts(wire.map { WireMapping.component(from: $0, descriptors: descriptors, limits: limits) })
                }
            }
        } catch {
            FileDescriptor.close(descriptors)
            throw .malformed(error.description)
        }
        if header.kind == .adoptConnection {
            FileDescriptor.close(descriptors)
            throw .malformed("adopt-connection frame without exactly one descriptor")
        }
        if header.kind == .refused {
            FileDescriptor.close(descriptors)
            let reason = parts.first.flatMap { if case .data(let bytes) = $0 { String(decoding: bytes, as: UTF8.self) } else { nil } }
            throw .refusedByPeer(reason: reason ?? "refused")
        }
        if header.kind == .limits || header.kind == .noReply {
            guard parts.isEmpty, descriptors.isEmpty else {
                FileDescriptor.close(descriptors)
                throw .malformed("a \(header.kind) frame carries nothing but its header")
            }
            if header.kind == .limits { return .limits(Int(header.id)) }
            return .refused(header.sequence, header.id == NoReplyReason.outOfDescriptors ? .receiverOutOfDescriptors : .noReply)
        }
        let replyPort = header.replyPort.map { WireMapping.sendPort(descriptors[$0], limits: limits) }
        if let firstPayload { parts[0] = .data(firstPayload) }
        state.peer?.noteHandedOut()
        // Made in place in each case, so that the message is never copied.
        if header.kind == .reply {
            return .reply(header.sequence, Message(id: header.id, parts: parts, replyPort: replyPort, sender: state.sender, peer: state.peer))
        }
        return .incoming(
            header.kind, header.sequence,
            Message(id: header.id, parts: parts, replyPort: replyPort, sender: state.sender, peer: state.peer))
    }

    /// Called by the loop when a bound connection is readable.
    func loopCanRead() {
        let handler = withLife { $0.handler }
        // A port's iteration that holds as much as it may stops the reading after this read
        // (its source is out of the loop's modes by then).
        let stream = handler?.stream
        _ = readAvailable(maxChunks: 16, until: { stream.map { $0.room == 0 } ?? false }) { delivery in
            deliver(delivery, handler: handler)
        }
    }

    /// Hands a delivery to the bound port's `handler` (`nil` once the connection is no
    /// longer bound: then it is dropped, its descriptors closed); replies go to their
    /// waiter. The port itself is reached only for a check-in or an adopted connection.
    func deliver(_ delivery: consuming Delivery, handler: ReceivePort.Handler?) {
        switch consume delivery {
        case .reply(let sequence, let message): complete(sequence, with: .success(message))
        case .refused(let sequence, let error): complete(sequence, with: .failure(error))
        case .undelivered(.request, let sequence): writeNoReply(sequence: sequence, reason: NoReplyReason.outOfDescriptors)
        case .undelivered(let kind, let sequence): failUndelivered(kind, sequence)
        case .incoming(let kind, let sequence, let message):
            guard let handler else { return discard(message) }
            ReceivePort.receive(message, kind: kind, sequence: sequence, from: self, handler: handler) {
                self.withLife { $0.port }
            }
        case .adopt(let socket):
            if let port = withLife({ $0.port }) { try? port.adoptConnection(socket) } else { try? socket.close() }
        case .limits(let bytes):
            peerMaxMessageBytes.store(bytes, ordering: .relaxed)
        }
    }

    /// A reply whose descriptors this process could not take fails its request with the
    /// error the read met; a lost adopted connection needs nothing (its peer sees it end).
    func failUndelivered(_ kind: WireKind, _ sequence: UInt64) {
        if kind == .reply { complete(sequence, with: .failure(.system(operation: "recvmsg (a reply's descriptors)", errno: EMFILE))) }
    }

    /// Closes the descriptors of a message no one will receive.
    func discard(_ message: Message) {
        FileDescriptor.close(message.descriptors)
    }
}
