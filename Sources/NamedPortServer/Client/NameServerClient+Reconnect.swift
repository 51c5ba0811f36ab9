import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem

/// Reconnection: a client connected with `reconnectingOn: loop` watches its connection on
/// that loop and, when the server goes away, connects again, registers its names again
/// and resumes its watches. Everything here runs on that loop's thread.
extension NameServerClient {
    /// The wait before the second try to reconnect (the first is made at once): 10 ms.
    /// Each later wait doubles, up to `maxReconnectDelay`.
    public static let firstReconnectDelay: Duration = .milliseconds(10)

    /// The longest wait between two tries to reconnect: 1 s. A change in the address's
    /// directory (a socket appearing) starts a try at once, whatever the wait.
    public static let maxReconnectDelay: Duration = .seconds(1)

    /// What wakes the supervising loop.
    enum SupervisorEvent {
        /// The connection to the server closed.
        case serverClosed
        /// Time to try to connect again (the timer, the directory changed).
        case retry
        /// A watch's port lost its server connection.
        case watchInterrupted(WatchEvents)
    }

    /// Watches `connection` on the supervising loop, if there is one: its end is seen
    /// within one pass of that loop (the kernel closes the socket of a dead server).
    func supervise(_ connection: ServerConnection) throws(NameServerError) {
        guard let supervisor else { return }
        do {
            try connection.port.onInvalidation(on: supervisor) { [weak self] _ in self?.pump(.serverClosed) }
        } catch {
            connection.port.invalidate()
            throw .transport(error)
        }
    }

    /// A watch's server connection closed: the supervising loop resumes it, on the current
    /// connection or after reconnecting.
    func watchInterrupted(_ events: WatchEvents) {
        guard let supervisor else { return events.fail(.connectionLost(address: address)) }
        do {
            try supervisor.perform { [weak self] in self?.pump(.watchInterrupted(events)) }
        } catch {
            events.fail(.connectionLost(address: address))
        }
    }

    /// Takes `event` into account and does what the state calls for, on the supervising
    /// loop's thread. Called again from inside (a request's reply wait runs the loop), it
    /// only records the event, and the outer call looks again when its step is done.
    func pump(_ event: SupervisorEvent) {
        let outermost = reconnection.withLock { reconnection -> Bool in
            switch event {
            case .serverClosed: break
            case .retry: reconnection.readyToTry = true
            case .watchInterrupted(let events): reconnection.interrupted.append(events)
            }
            guard !reconnection.running else {
                reconnection.pending = true
                return false
            }
            reconnection.running = true
            return true
        }
        guard outermost else { return }
        repeat {
            step()
        } while reconnection.withLock { reconnection -> Bool in
            if reconnection.pending {
                reconnection.pending = false
                return true
            }
            reconnection.running = false
            return false
        }
    }

    /// One step of the state machine (`ServerLink`).
    private func step() {
        switch link.withLock({ $0 }) {
        case .closed:
            return
        case .connected(let connection) where connection.port.isValid:
            resumeInterruptedWatches(on: connection)
            return
        case .connected(let connection):
            guard lose(connection) else { return }
        case .reconnecting:
            break
        }
        guard reconnection.withLock({ reconnection -> Bool in
            defer { reconnection.readyToTry = false }
            return reconnection.readyToTry
        }) else { return }
        watchDirectory()
        let connection: ServerConnection
        do {
            connection = try Self.connectOnce(address, timeout: timeout, trustedServerUsers, awaitingHello: true)
        } catch {
            return scheduleRetry()
        }
        let installed = link.withLock { link -> Bool in
            guard case .reconnecting = link else { return false }
            link = .connected(connection)
            return true
        }
        guard installed else { return connection.port.invalidate() }
        endWaiting()
        do {
            try supervise(connection)
        } catch {
            return
        }
        restore(on: connection)
    }

    /// The connection closed: the client is reconnecting, its names are lost. False if the
    /// link had moved on already.
    private func lose(_ connection: ServerConnection) -> Bool {
        let lost = link.withLock { link -> Bool in
            guard case .connected(let current) = link, current.port === connection.port else { return false }
            link = .reconnecting(lastPID: current.knownPID)
            return true
        }
        guard lost else { return false }
        let lostNames = registrations.withLock { registrations in
            registrations.connectionLost()
            return registrations.byName.values.sorted { $0.name < $1.name }
        }
        for registration in lostNames { registration.move(to: .serverLost) }
        reconnection.withLock { reconnection in
            reconnection.readyToTry = true
            reconnection.delay = Self.firstReconnectDelay
        }
        return true
    }

    /// Arms the timer of the next try and doubles the wait after it, up to its bound.
    private func scheduleRetry() {
        guard let supervisor else { return }
        let timer = LoopTimer(after: reconnection.withLock { $0.delay }) { [weak self] _ in self?.pump(.retry) }
        let previous = reconnection.withLock { reconnection -> LoopTimer? in
            defer {
                reconnection.timer = timer
                reconnection.delay = min(reconnection.delay * 2, Self.maxReconnectDelay)
            }
            return reconnection.timer
        }
        previous?.invalidate()
        try? supervisor.add(timer, forMode: .common)
    }

    /// Watches the address's directory (its parent while it is missing), so that a server
    /// appearing there starts a try at once rather than at the end of the wait.
    private func watchDirectory() {
        guard let supervisor else { return }
        let directory = NameServerAddress.directory(of: address)
        let present = (try? FileSystem.status(directory)) != nil
        if let watching = reconnection.withLock({ $0.directory }) {
            // The directory appeared: its own watch sees the socket appear, the parent's does not.
            guard watching.isParent && present else { return }
            endWatching(watching)
            reconnection.withLock { $0.directory = nil }
        }
        let parent = !present
        guard let watch = try? DirectoryWatch(parent ? NameServerAddress.directory(of: directory) : directory) else { return }
        let source = DescriptorSource(descriptor: watch.readableDescriptor) { [weak self] _, _ in
            watch.drain()
            self?.pump(.retry)
        }
        reconnection.withLock { $0.directory = .init(watch: watch, source: source, isParent: parent) }
        try? supervisor.add(source, forMode: .common)
    }

    /// Ends the timer and the directory watch, on the supervising loop's thread.
    private func endWaiting() {
        let (timer, directory) = reconnection.withLock { $0.takeWaiting() }
        timer?.invalidate()
        if let directory { endWatching(directory) }
    }

    private func endWatching(_ watching: Reconnection.DirectoryWatching) {
        watching.source.invalidate()
        watching.watch.close()
    }

    /// Ends the reconnection's timer and directory watch from any thread (`close`, deinit):
    /// the descriptor is closed on the loop's thread, once its source no longer watches it.
    func endReconnection() {
        let (timer, directory) = reconnection.withLock { $0.takeWaiting() }
        timer?.invalidate()
        guard let directory else { return }
        directory.source.invalidate()
        if let supervisor, !supervisor.isCurrent, (try? supervisor.perform({ directory.watch.close() })) != nil { return }
        directory.watch.close()
    }

    // MARK: Restoring

    /// On a new connection: registers the lost names again with their ports (in name
    /// order), then resumes every watch. Stops at the first sign that this connection is
    /// gone too: the next reconnection carries on.
    private func restore(on connection: ServerConnection) {
        let lost = registrations.withLock { $0.byName.values.filter { $0.state == .serverLost }.sorted { $0.name < $1.name } }
        for registration in lost {
            guard registration.port.isValid else {
                forget(registration, as: .released)
                continue
            }
            do {
                let queued = try registerAgain(registration, on: connection)
                registration.settle(queued: queued, otherwise: .registeredAgain)
            } catch .nameTaken(_, let pid) {
                forget(registration, as: .takenByAnother(ownerPID: pid))
            } catch .connectionLost {
                return
            } catch .transport(.sendTimedOut), .transport(.receiveTimedOut) {
                // A server that does not answer is taken for gone: the next connection registers it.
                return connection.port.invalidate()
            } catch {
                forget(registration, as: .failed(error))
            }
        }
        reconnection.withLock { $0.interrupted = [] }
        for events in watches.withLock({ $0.values.compactMap(\.events) }) {
            guard resume(events, on: connection) else { return }
        }
    }

    /// Registers a lost name again on `connection`, with the port it had.
    /// Whether the new server queued it behind another owner (a standby's).
    private func registerAgain(_ registration: NameRegistration, on connection: ServerConnection) throws(NameServerError) -> Bool {
        let held = registrations.withLock { $0.heldName(for: registration.port) }
        let attempts = try RegisterAttempts(
            registration.name, registration.port, scope: registration.scope, held: held, terms: registration.terms,
            notices: registration.notices, again: true)
        var queued = false
        try attempts.send { (call) throws(NameServerError) in
            queued = try Self.blockingRequest(
                call.operation, call.fields, on: connection, address: address, timeout: timeout, describing: call.what
            ).saysQueued
        }
        if !queued { registrations.withLock { $0.markHeld(registration) } }
        return queued
    }

    /// Forgets a registration that ended, unless a new one took its place.
    private func forget(_ registration: NameRegistration, as state: NameRegistrationState) {
        registrations.withLock { $0.remove(registration) }
        registration.move(to: state)
    }

    /// Resumes the watches whose server connection closed while the client's seemed up.
    private func resumeInterruptedWatches(on connection: ServerConnection) {
        let interrupted = reconnection.withLock { reconnection -> [WatchEvents] in
            defer { reconnection.interrupted = [] }
            return reconnection.interrupted
        }
        for events in interrupted where events.isInterrupted {
            guard resume(events, on: connection) else { return }
        }
    }

    /// Starts `events` again on `connection`, with a new port and a new watch id; the new
    /// snapshot is diffed against what the watch reported. False if the connection is gone.
    private func resume(_ events: WatchEvents, on connection: ServerConnection) -> Bool {
        guard let generation = events.prepareResume() else {
            watches.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(events)) }
            return true
        }
        do {
            var fields = try Self.blockingRequest(
                .watch, Self.watchFields(makeWatchID(), events), on: connection, address: address, timeout: timeout,
                describing: "watching '\(events.text)' again")
            events.resumed(generation: generation, owners: try fields.ownersHereAndElsewhere())
            return true
        } catch .connectionLost {
            return false
        } catch .transport(.sendTimedOut), .transport(.receiveTimedOut) {
            connection.port.invalidate()
            return false
        } catch {
            events.fail(error)
            watches.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(events)) }
            return true
        }
    }
}
