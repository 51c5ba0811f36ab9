import Glibc
import PermanentThread
import Synchronization
import PortKitSystem
import PortKitLocks

extension PortListener {
    /// The most handshakes a secured listener runs at once: 256, or an eighth of the
    /// process's descriptor limit if that is less (the rest stay for the connections).
    static let maxPendingHandshakes = min(256, max(16, FileSystem.descriptorLimit / 8))

    /// Secures an accepted connection on the port's loop (this thread: accepting runs
    /// there) and hands it to `port` once its handshake is complete; closes it when the
    /// handshake fails or takes too long.
    ///
    /// When `maxPendingHandshakes` are under way already, one of them makes room rather
    /// than the newcomer being refused: the oldest of those whose peer has sent nothing
    /// yet, else the oldest. A peer that connects and never speaks thus cannot keep a
    /// peer that does from completing its handshake, however many such connections it
    /// opens, nor however fast it opens them again.
    func beginHandshake(_ accepted: FileDescriptor, securedBy security: any StreamSecurity, into port: ReceivePort) {
        let stream: any SecuredStream
        do { stream = try security.secure(socket: accepted.rawValue, as: .accepting) } catch {
            try? accepted.close()
            return
        }
        let handshake = AcceptingHandshake(socket: accepted, stream: stream) { [weak self, weak port] handshake, secured in
            _ = self?.state.withLock { $0.handshakes.removeValue(forKey: ObjectIdentifier(handshake)) }
            guard secured else { return }
            if let port {
                try? port.adoptSecuredConnection(accepted, stream)
            } else {
                try? accepted.close()
            }
        }
        let placed = state.withLock { state -> (ThreadLoop, [LoopMode], evicted: AcceptingHandshake?)? in
            guard !state.closed, let loop = state.loop else { return nil }
            var evicted: AcceptingHandshake?
            if state.handshakes.count >= Self.maxPendingHandshakes, let victim = Self.evictionVictim(in: state.handshakes) {
                evicted = state.handshakes.removeValue(forKey: ObjectIdentifier(victim))
            }
            state.handshakes[ObjectIdentifier(handshake)] = handshake
            return (loop, state.modes, evicted)
        }
        guard let (loop, modes, evicted) = placed else {
            try? accepted.close()
            return
        }
        evicted?.cancel()
        handshake.start(on: loop, modes: modes, timeout: ReceivePort.handshakeTimeout)
    }

    /// The handshake that makes room for a new one: the oldest whose peer has sent
    /// nothing, else the oldest. A handshake that looks silent is asked again (its peer's
    /// hello may be in, its readable event not yet served): only a truly silent one goes.
    private static func evictionVictim(in handshakes: [ObjectIdentifier: AcceptingHandshake]) -> AcceptingHandshake? {
        let byAge = handshakes.values.sorted { $0.sequence < $1.sequence }
        return byAge.first { !$0.heardFromPeer && !$0.hasPeerSent() } ?? byAge.first
    }
}

/// The handshake of one connection a secured listener accepted, driven on the port's
/// loop: a descriptor source on the socket steps it each time the socket is readable (and
/// one on a duplicate while it waits for room), and a timer ends it at its deadline. No
/// thread waits: the listener's loop goes on serving while any number are under way.
final class AcceptingHandshake: Sendable {
    private let socket: FileDescriptor
    private let stream: any SecuredStream
    /// Told once, on the loop's thread, how the handshake ended: secured (the socket and
    /// stream are then the receiver's), or not (the socket is closed already).
    private let ended: @Sendable (AcceptingHandshake, Bool) -> Void
    private let phase = Locked(Phase.waiting)
    /// Its place in the order handshakes began (the oldest is the lowest).
    let sequence = AcceptingHandshake.nextSequence.wrappingAdd(1, ordering: .relaxed).oldValue
    private static let nextSequence = Atomic<UInt64>(0)
    /// Whether the peer has sent a byte (a peer that has not is the first to make room).
    private let heard = Atomic<Bool>(false)

    /// Where the handshake stands. Changed on the loop's thread only (mode changes aside).
    private enum Phase {
        /// Made, not started yet.
        case waiting
        /// Under way: what watches it.
        case running(Watch)
        /// Secured, refused, timed out or cancelled.
        case over
    }

    /// The sources and timer of a running handshake, and the modes they are in.
    private struct Watch {
        let loop: ThreadLoop
        var modes: [LoopMode]
        let readable: DescriptorSource
        let timer: LoopTimer
        /// Watches a duplicate of the socket for room while the handshake waits for it.
        var writable: (source: DescriptorSource, duplicate: FileDescriptor)?
    }

    init(socket: FileDescriptor, stream: any SecuredStream, ended: @escaping @Sendable (AcceptingHandshake, Bool) -> Void) {
        self.socket = socket
        self.stream = stream
        self.ended = ended
    }

    /// Starts watching on `loop` (this thread) in `modes`, and takes the first step (the
    /// peer's first message is usually in already).
    func start(on loop: ThreadLoop, modes: [LoopMode], timeout: Duration) {
        let readable = DescriptorSource(descriptor: socket.rawValue, events: .readable) { [self] _, _ in
            heard.store(true, ordering: .relaxed)
            step()
        }
        _ = hasPeerSent()
        let timer = LoopTimer(after: timeout) { [self] _ in finish(secured: false) }
        let started = phase.withLock { phase -> Bool in
            guard case .waiting = phase else { return false }
            phase = .running(Watch(loop: loop, modes: modes, readable: readable, timer: timer))
            return true
        }
        guard started else { return }
        for mode in modes {
            try? loop.add(readable, forMode: mode)
            try? loop.add(timer, forMode: mode)
        }
        step()
    }

    /// One step of the handshake, on the loop's thread.
    private func step() {
        switch stream.handshake() {
        case .complete: finish(secured: true)
        case .failed: finish(secured: false)
        case .wantsReadable: watchForRoom(false)
        case .wantsWritable: watchForRoom(true)
        }
    }

    /// Starts (or stops) watching a duplicate of the socket for room; the readable source
    /// watches the socket itself throughout.
    private func watchForRoom(_ wanted: Bool) {
        /// What changes: a source added in these modes, or one that goes.
        enum Change {
            case add(DescriptorSource, ThreadLoop, [LoopMode])
            case drop(DescriptorSource, FileDescriptor)
        }
        let change = phase.withLock { phase -> Change? in
            guard case .running(var watch) = phase else { return nil }
            if wanted {
                guard watch.writable == nil, let duplicate = try? socket.duplicate() else { return nil }
                let source = DescriptorSource(descriptor: duplicate.rawValue, events: .writable) { [self] _, _ in step() }
                watch.writable = (source, duplicate)
                phase = .running(watch)
                return .add(source, watch.loop, watch.modes)
            }
            guard let (source, duplicate) = watch.writable else { return nil }
            watch.writable = nil
            phase = .running(watch)
            return .drop(source, duplicate)
        }
        switch change {
        case .add(let source, let loop, let modes)?:
            for mode in modes { try? loop.add(source, forMode: mode) }
        case .drop(let source, let duplicate)?:
            source.invalidate()
            try? duplicate.close()
        case nil:
            break
        }
    }

    /// Ends the handshake (once): its sources and timer go, and the socket goes to the
    /// listener's `ended` if secured, or is closed.
    private func finish(secured: Bool) {
        let previous = phase.withLock { phase -> Phase in
            defer { phase = .over }
            return phase
        }
        switch previous {
        case .over:
            return
        case .waiting:
            break
        case .running(let watch):
            watch.readable.invalidate()
            watch.timer.invalidate()
            if let (source, duplicate) = watch.writable {
                source.invalidate()
                try? duplicate.close()
            }
        }
        if !secured { try? socket.close() }
        ended(self, secured)
    }

    /// Whether the peer has sent anything yet, as last seen.
    var heardFromPeer: Bool { heard.load(ordering: .relaxed) }

    /// Looks (without taking them) for bytes from the peer waiting on the socket, and
    /// remembers it if some are; whether there are.
    func hasPeerSent() -> Bool {
        var first: UInt8 = 0
        guard let count = try? withUnsafeMutableBytes(of: &first, { try socket.peek(into: $0) }), count > 0 else { return false }
        heard.store(true, ordering: .relaxed)
        return true
    }

    /// Ends a handshake still under way (its listener closed, or it makes room for a
    /// newer one), on the loop's thread.
    func cancel() { finish(secured: false) }

    /// Adds its sources and timer to `mode` as well (or, with `adding` false, takes them out),
    /// as the listener's accepting source is.
    func change(_ mode: LoopMode, adding: Bool) {
        guard let watch = phase.withLock({ phase -> Watch? in
            guard case .running(var watch) = phase else { return nil }
            if adding { if !watch.modes.contains(mode) { watch.modes.append(mode) } } else { watch.modes.removeAll { $0 == mode } }
            phase = .running(watch)
            return watch
        }) else { return }
        let sources = [watch.readable] + (watch.writable.map { [$0.source] } ?? [])
        for source in sources {
            if adding { try? watch.loop.add(source, forMode: mode) } else { watch.loop.remove(source, forMode: mode) }
        }
        if adding { try? watch.loop.add(watch.timer, forMode: mode) } else { watch.loop.remove(watch.timer, forMode: mode) }
    }
}
