import PermanentThread
import PortMessaging

/// A tapped connection: what the server brokers to a looker, instead of a direct
/// connection, while a monitor watches the name. Two socket pairs meet on the server's
/// loop: the looker's end arrives at `entrance` (a port of the tap's own), and `exit` is a
/// connection of its own into the owner's port. Each message is passed on as it came
/// (id, components, reply port; descriptors and ports go on as any message's do), its
/// requests as requests whose replies come back to the looker, and every one is reported.
///
/// The tap never waits: a side that does not take a message at once (its receiver full)
/// ends the tapped connection, as does either side closing or dying; the tap then closes
/// both, so each sees the other gone as over a direct connection.
// Safety of @unchecked Sendable: `phase` and `requests` are read and written only on
// `loop`'s thread (the entrance's handler and peer observer, the exit's invalidation
// handler and reply completions, which `readReplies(on:)` brings there, are all run
// there; a completion from elsewhere is performed onto it). The lets are immutable.
final class MonitorTap: @unchecked Sendable {
    /// The server's number for the connection, in every event of it.
    let number: UInt64
    /// The monitored name the connection goes to, and its owner's uid (who may monitor it).
    let name: String
    let ownerUID: UInt32
    let loop: ThreadLoop
    /// Where the looker's messages arrive.
    let entrance: ReceivePort
    /// The connection into the owner's port.
    let exit: SendPort
    /// Hands an event to the monitors of `name`.
    private let report: (MonitoredMessage) -> Void
    /// Told once, when the tap closes.
    private let ended: (MonitorTap) -> Void

    /// Where the tap stands: waiting for the looker to take its end, relaying, or closed.
    private enum Phase {
        case brokered
        case relaying
        case closed
    }

    private var phase = Phase.brokered
    /// The requests relayed so far: each request's number is its correlation.
    private var requests: UInt64 = 0

    init(
        number: UInt64, name: String, ownerUID: UInt32, loop: ThreadLoop, exit: SendPort,
        report: @escaping (MonitoredMessage) -> Void, ended: @escaping (MonitorTap) -> Void
    ) {
        self.number = number
        self.name = name
        self.ownerUID = ownerUID
        self.loop = loop
        self.entrance = ReceivePort()
        self.exit = exit
        self.report = report
        self.ended = ended
    }

    /// Starts relaying on the loop (its thread): the looker's end, once it travels in the
    /// lookup's reply, connects to `entrance`.
    func start() throws(PortError) {
        // Weakly: a closed tap is let go by the server while its ports may still report.
        entrance.observePeers { [weak self] event in
            guard let self else { return }
            switch event {
            case .connected: if self.phase == .brokered { self.phase = .relaying }
            case .disconnected: self.close()
            }
        }
        try exit.readReplies(on: loop)
        try exit.onInvalidation(on: loop) { [weak self] _ in self?.close() }
        try entrance.schedule(on: loop, inModes: [.default]) { [weak self] message, pending in
            guard let self else {
                message.discardAttachments()
                _ = pending?.refuse()
                return
            }
            self.relay(message, pending)
        }
    }

    /// Closes the tap if the looker never took its end (the lookup's reply did not reach it).
    func closeUnlessTaken() {
        if phase == .brokered { close() }
    }

    /// Closes both sides, once; the monitors are told.
    func close() {
        guard phase != .closed else { return }
        phase = .closed
        entrance.invalidate()
        exit.invalidate()
        report(event(.closed, .toName))
        ended(self)
    }

    /// The event for `kind`, of `message` when there is one.
    func event(
        _ kind: MonitoredMessage.Kind, _ direction: MonitoredMessage.Direction, _ message: Message? = nil,
        correlation: UInt64 = 0, sender: SenderCredentials? = nil
    ) -> MonitoredMessage {
        MonitoredMessage(
            name: name, connection: number, kind: kind, direction: direction, id: message?.id ?? 0, correlation: correlation,
            sender: message?.sender ?? sender, time: MonitorEventCodec.now(),
            components: message.map(MonitorEventCodec.components) ?? [], hasReplyPort: message?.replyPort != nil)
    }

    // MARK: Relaying

    /// A message from the looker: reported, then passed on to the owner. What it carries is
    /// the tap's once received: the owner gets duplicates (descriptors) or connections of
    /// its own (ports), and the tap lets its own go.
    private func relay(_ message: Message, _ pending: PendingReply?) {
        defer { message.discardAttachments() }
        guard phase != .closed else {
            _ = pending?.refuse()
            return
        }
        let onward = Message(id: message.id, components: message.components, replyPort: message.replyPort)
        guard let pending else {
            report(event(.message, .toName, message))
            do { try exit.send(onward, timeout: .zero) } catch { close() }
            return
        }
        requests += 1
        let correlation = requests
        report(event(.request, .toName, message, correlation: correlation))
        do {
            try exit.request(onward, sendTimeout: .zero, receiveTimeout: nil) { [weak self] outcome in
                guard let self else { return outcome.discardReply() }
                if self.loop.isCurrent { return self.replied(outcome, pending, correlation) }
                do { try self.loop.perform { self.replied(outcome, pending, correlation) } } catch { outcome.discardReply() }
            }
        } catch {
            _ = pending.refuse()
            report(event(.noReply, .fromName, correlation: correlation))
            close()
        }
    }

    /// The owner's outcome of the request numbered `correlation`, passed back to the looker.
    private func replied(_ outcome: Result<Message, PortError>, _ pending: PendingReply, _ correlation: UInt64) {
        switch outcome {
        case .success(let reply):
            defer { reply.discardAttachments() }
            report(event(.reply, .fromName, reply, correlation: correlation))
            let back = Message(id: reply.id, components: reply.components, replyPort: reply.replyPort)
            do { try pending.answer(back, timeout: .zero) } catch {
                report(event(.noReply, .fromName, correlation: correlation))
                close()
            }
        case .failure(let error):
            _ = pending.refuse()
            report(event(.noReply, .fromName, correlation: correlation))
            if error != .noReply { close() }
        }
    }
}

extension Result<Message, PortError> {
    /// Lets go of what a reply nobody takes carries.
    func discardReply() {
        if case .success(let reply) = self { reply.discardAttachments() }
    }
}
