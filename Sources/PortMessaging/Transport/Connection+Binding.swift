import Glibc
import PermanentThread
import PortKitLocks
import PortKitSystem

extension Connection {
    // MARK: Binding and watching

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
        passCredentialsBeforeUse()
        guard gate.enter() else { throw closedError }
        defer { if gate.leave() { releaseDescriptors() } }
        let target = ReadTarget(connection: self)
        let source = DescriptorSource(descriptor: readFD.rawValue, events: .readable) { _, _ in
            target.connection.loopCanRead()
        }
        let binding = Binding(port: port, handler: handler, loop: loop, source: source)
        let stillOpen = withLife { $0.changeOpen { $0.binding = binding } != nil }
        guard stillOpen else { throw .peerDied }
        do {
            for mode in modes { try loop.add(source, forMode: mode) }
        } catch {
            close(.invalidPort)
            throw error == .loopEnded ? .invalidPort : .system(operation: "add descriptor source", errno: EINVAL)
        }
    }

    /// The source that reads the connection for its port, while it is open and bound.
    var boundSource: DescriptorSource? {
        withLife { $0.binding?.source }
    }

    /// Watches the connection for its peer's death on `loop`: a hang-up-only source (incoming
    /// data does not wake it).
    func watchForHangup(on loop: ThreadLoop) throws(PortError) {
        let connection = Unretained(self)
        try watchDuplicate(on: loop, events: .hangup) { _, events in
            if events.contains(.hangup) || events.contains(.error) { connection.object?.close(.peerDied) }
        }
    }

    /// Watches a duplicate of the read descriptor on `loop`, in its common modes, so it
    /// never collides with the source that reads a bound connection; the connection's
    /// close removes the source and closes the duplicate. Nothing when it is closed already.
    /// `whenLoopEnds`, if given, is called on the loop's thread should the loop end (its
    /// thread stop) while the connection is still open.
    func watchDuplicate(
        on loop: ThreadLoop, events: DescriptorEvents, whenLoopEnds: (@Sendable () -> Void)? = nil,
        _ handler: @escaping @Sendable (DescriptorSource, DescriptorEvents) -> Void
    ) throws(PortError) {
        let duplicate = try usingDescriptors("dup") { () throws(Errno) -> FileDescriptor in try readFD.duplicate() }
        let source = DescriptorSource(descriptor: duplicate.rawValue, events: events, handler: handler)
        // A loop tells a custom source, not a descriptor source, that it ends: one that
        // performs nothing stands for the watch, and goes with it at the close.
        let loopEnd = whenLoopEnds.map { whenLoopEnds in
            LoopSource(cancel: { loop, _ in if loop.ended { whenLoopEnds() } }, perform: {})
        }
        let watcher = Watcher(loop: loop, source: source, descriptor: duplicate, loopEnd: loopEnd)
        let installed = withLife { $0.changeOpen { $0.watchers.append(watcher) } != nil }
        guard installed else {
            try? duplicate.close()
            return
        }
        do {
            try loop.add(source, forMode: .common)
            if let loopEnd { try loop.add(loopEnd, forMode: .common) }
        } catch {
            throw .loop(.loopEnded)
        }
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
        /// What tells the connection that `loop` ended, if it wants to know.
        let loopEnd: LoopSource?
    }
}
