import Glibc
import PermanentThread
import Synchronization
import PortKitSystem
import PortKitLocks

extension Connection {
    // MARK: The queue of a loop's writes

    /// What a loop's thread wrote and the socket did not take at once, in order, with the
    /// source that writes it as the socket drains. Touched only by the holder of the
    /// writer token (`writing`), and by `close`.
    struct Outbox {
        var frames: [QueuedFrame] = []
        /// Watches a duplicate of the descriptor for room (the read source, if any, has the
        /// descriptor itself), on the loop that queued first; `nil` while nothing is queued.
        var source: DescriptorSource?
        var watched: FileDescriptor?
        var loop: ThreadLoop?
    }

    /// The object an `AtomicLazyReference` keeps the queue's lock in.
    final class OutboxHolder: Sendable {
        let lock: Locked<Outbox>
        init(_ lock: Locked<Outbox>) { self.lock = lock }
    }

    /// The queue, made the first time a write queues (most connections never do).
    var outbox: Locked<Outbox> {
        if let made = existingOutbox { return made }
        let made = outboxStorage.storeIfNil(OutboxHolder(Locked(Outbox())))
        outboxMade.store(true, ordering: .releasing)
        return made.lock
    }

    /// The queue, if a write ever made it. Asks the flag first: `AtomicLazyReference.load`
    /// is not specialized across modules (a generic metadata lookup per call), and every
    /// close asks.
    var existingOutbox: Locked<Outbox>? {
        outboxMade.load(ordering: .acquiring) ? outboxStorage.load()?.lock : nil
    }

    /// The rest of one frame: its bytes not yet written, and the descriptors that go with
    /// its first byte (duplicates, owned here) if that byte is still to go.
    struct QueuedFrame {
        var bytes: [UInt8]
        var offset = 0
        var descriptors: [FileDescriptor]
    }

    /// Queues the rest of a frame (the writer token held) and makes sure `loop` writes it
    /// once the socket has room.
    func enqueue(_ rest: FrameBytes, descriptors: [CInt], flushingOn loop: ThreadLoop) throws(PortError) {
        var owned: [FileDescriptor] = []
        for fd in descriptors {
            do {
                owned.append(try FileDescriptor(rawValue: fd).duplicate())
            } catch {
                for made in owned { try? made.close() }
                throw error == .badFileDescriptor ? .invalidDescriptor(fd) : PortError("dup", error)
            }
        }
        let frame = QueuedFrame(bytes: rest.joined(), descriptors: owned)
        let needsSource = outbox.withLock { outbox -> Bool in
            outbox.frames.append(frame)
            return outbox.source == nil
        }
        queuedBytes.add(rest.count, ordering: .relaxed)
        if needsSource { try watchForRoom(on: loop) }
    }

    /// Starts the source that writes the queue when the socket has room.
    private func watchForRoom(on loop: ThreadLoop) throws(PortError) {
        let watched = try usingDescriptors("dup") { () throws(Errno) -> FileDescriptor in try writeFD.duplicate() }
        // A strong capture: the cycle (connection → outbox → source → connection) ends when
        // the queue is written out or the connection closes, both of which drop the source.
        let source = DescriptorSource(descriptor: watched.rawValue, events: .writable) { [self] _, _ in
            flushFromLoop()
        }
        outbox.withLock { outbox in
            outbox.source = source
            outbox.watched = watched
            outbox.loop = loop
        }
        do {
            try loop.add(source, forMode: .common)
        } catch {
            close(.invalidPort)
            throw .invalidPort
        }
    }

    /// The loop found room: writes what it can of the queue, unless another thread holds
    /// the token (which writes the queue itself before its own frame).
    private func flushFromLoop() {
        let claimed = writing.withLock { busy -> Bool in
            if busy { return false }
            busy = true
            return true
        }
        guard claimed else { return }
        defer {
            writing.withLock { $0 = false }
            writing.broadcast()
        }
        _ = try? flushQueued()
    }

    /// Writes what the socket takes of the queue (the writer token held, or from `close`'s
    /// side never); true when the queue is empty. Once empty, its source goes.
    func flushQueued() throws(PortError) -> Bool {
        guard queuedBytes.load(ordering: .relaxed) > 0 else { return true }
        while true {
            guard let (bytes, offset, descriptors) = outbox.withLock({ outbox -> ([UInt8], Int, [CInt])? in
                guard let head = outbox.frames.first else { return nil }
                return (head.bytes, head.offset, head.offset == 0 ? head.descriptors.map(\.rawValue) : [])
            }) else { break }
            let result = withDescriptors {
                bytes.withUnsafeBytes { raw in
                    medium.writeSome(UnsafeRawBufferPointer(rebasing: raw[offset...]), descriptors: descriptors)
                }
            }
            switch result {
            case nil:
                throw closedError
            case .success(let written)?:
                queuedBytes.subtract(written, ordering: .relaxed)
                let sent = outbox.withLock { outbox -> [FileDescriptor] in
                    guard !outbox.frames.isEmpty else { return [] }
                    var taken: [FileDescriptor] = []
                    if outbox.frames[0].offset == 0 { swap(&taken, &outbox.frames[0].descriptors) }
                    outbox.frames[0].offset += written
                    if outbox.frames[0].offset >= outbox.frames[0].bytes.count { outbox.frames.removeFirst() }
                    return taken
                }
                for fd in sent { try? fd.close() }  // the kernel holds its own reference now
            case .failure(.wouldBlock)?:
                return false
            case .failure(let error)?:
                let failure = PortError(connection: "send", error)
                close(failure == .peerDied ? .peerDied : failure)
                throw failure
            }
        }
        stopWatchingForRoom()
        return true
    }

    /// Whether a source watches for room (on a duplicate of the descriptor).
    var isWatchingForRoom: Bool {
        existingOutbox?.withLock { $0.source != nil } ?? false
    }

    /// Removes the source of an empty queue.
    private func stopWatchingForRoom() {
        guard let outbox = existingOutbox else { return }
        let taken = outbox.withLock { outbox -> (DescriptorSource, FileDescriptor?, ThreadLoop?)? in
            guard let source = outbox.source else { return nil }
            defer { outbox.source = nil; outbox.watched = nil; outbox.loop = nil }
            return (source, outbox.watched, outbox.loop)
        }
        guard let (source, watched, loop) = taken else { return }
        let finish: @Sendable () -> Void = {
            source.invalidate()
            try? watched?.close()
        }
        if let loop { Self.onLoopThread(loop, finish) } else { finish() }
    }

    /// Drops what is queued (the connection closed: no one will read it) and its source.
    func discardQueued() {
        guard let outbox = existingOutbox else { return }
        let dropped = outbox.withLock { outbox -> [QueuedFrame] in
            defer { outbox.frames = [] }
            return outbox.frames
        }
        queuedBytes.store(0, ordering: .relaxed)
        for frame in dropped { for fd in frame.descriptors { try? fd.close() } }
        stopWatchingForRoom()
    }
}
