import PermanentThread
import PortMessaging

/// Standbys and replacement: a register of a taken name that asked to queue behind its
/// owner, or to replace an owner that allowed it; and the takeover when an owner goes.
extension NameService {
    typealias Holder = NameTable<SendPort, PendingLookup>.Holder

    /// A register's fields after its scope: its terms and notice port (absent: the plain
    /// terms, no port).
    func readTerms(_ fields: inout NameFieldReader) throws(NameServerError) -> (RegisterTerms, SendPort?) {
        guard !fields.atEnd else { return (RegisterTerms(), nil) }
        let flags = try fields.integer()
        let requirement = fields.atEnd ? nil : try RequirementField.decode(try fields.bytes())
        let terms = try RegisterTerms(flags: flags, requirement: requirement)
        let notices = fields.atEnd ? nil : try fields.port()
        if terms.wantsNotices && notices == nil { throw .protocolError("a queued or replaceable register carries a notice port") }
        return (terms, notices)
    }

    /// A register of a name `holder` holds, whose terms ask to queue or replace. Queued:
    /// answered here (ok [1]), true. Replaced: the old owner is released and told, false,
    /// and the caller registers the name as if it had been free. Throws `nameTaken` for an
    /// owner that did not allow replacement.
    func takeOver(_ standby: Holder, from holder: Holder, _ pending: PendingReply, _ client: Client) throws(NameServerError) -> Bool {
        switch standby.terms.ifTaken {
        case .fail:
            throw .nameTaken(name: holder.owner.name, ownerPID: holder.owner.pid)
        case .queue:
            _ = try table.enqueue(standby)
            if let channel = standby.channel {
                try? channel.onInvalidation(on: loop) { [unowned self] dead in self.channelDied(dead) }
            }
            answer(pending, Message(id: NameStatus.ok.rawValue, components: [NameField.integer(UInt64(1))]), client)
            return true
        case .replace:
            guard holder.terms.replaceable else { throw .nameTaken(name: holder.owner.name, ownerPID: holder.owner.pid) }
            let (old, channelFreed) = try table.unregister(holder.owner.name, client: holder.client)
            if channelFreed { old.channel?.invalidate() }
            let notice = Message(
                id: RegistrationNotice.replaced.rawValue,
                components: [NameField.string(old.owner.name), NameField.integer(standby.owner.pid)])
            try? old.notices?.send(notice, timeout: .zero)
            old.notices?.invalidate()
            notifyWatchers(.vanished, old.owner)
            return false
        }
    }

    /// `unregister` of a name `client` waits for as a standby: it leaves the queue. False
    /// when it is not queued for it.
    func unregisterStandby(_ name: String, _ client: Client, _ pending: PendingReply) -> Bool {
        guard let standby = table.leaveQueue(name, client: client.peer.id) else { return false }
        standby.channel?.invalidate()
        standby.notices?.invalidate()
        answer(pending, Message(id: NameStatus.ok.rawValue, components: []), client)
        return true
    }

    /// After `released` let their names go (watchers told): closes their notice ports and
    /// gives each name to its first standby whose port lives, which is told (`granted`),
    /// then its watchers (`appeared`) and the lookups waiting for it.
    func handOver(_ released: [Holder]) {
        for holder in released {
            holder.notices?.invalidate()
            promoteStandby(for: holder.owner.name)
        }
    }

    private func promoteStandby(for name: String) {
        while let standby = table.promoteStandby(for: name) {
            guard let channel = standby.channel, channel.isValid else {
                _ = try? table.unregister(name, client: standby.client)
                standby.channel?.invalidate()
                standby.notices?.invalidate()
                continue
            }
            let notice = Message(id: RegistrationNotice.granted.rawValue, components: [NameField.string(name)])
            try? standby.notices?.send(notice, timeout: .zero)
            notifyWatchers(.appeared, standby.owner)
            answerWaiters(for: name)
            return
        }
    }

    /// Takes the standbys of a gone client, or of a dead port, out of their queues and
    /// closes what they held.
    func dropStandbys(_ dropped: [Holder]) {
        for standby in dropped {
            standby.channel?.invalidate()
            standby.notices?.invalidate()
        }
    }
}
