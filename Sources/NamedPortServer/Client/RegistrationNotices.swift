import Glibc
import PermanentThread
import PortMessaging

/// A registration's notices: a standby's registration, or a replaceable owner's, carries a
/// port of its own to the server (like a watch's), on the process's shared reply loop, at
/// which the server tells it that it took the name over (`granted`) or that another
/// connection replaced it (`replaced`).
extension NameServerClient {
    /// A registration not yet sent, with its notice port when its terms need one.
    func prepareRegistration(
        _ name: String, _ port: ReceivePort, _ scope: NameScope, _ terms: RegisterTerms
    ) throws(NameServerError) -> NameRegistration {
        if terms.requirement?.hasPredicate == true {
            throw .requirementCannotTravel(requirement: terms.requirement?.description ?? "")
        }
        guard terms.wantsNotices else { return NameRegistration(name: name, port: port, scope: scope, terms: terms) }
        let notices = ReceivePort()
        let registration = NameRegistration(name: name, port: port, scope: scope, terms: terms, notices: notices)
        do {
            try notices.schedule(on: try SharedReplyLoop.loop()) { [weak self, weak registration] message in
                if let self, let registration { self.noticed(message, registration) }
                return nil
            }
        } catch {
            notices.invalidate()
            throw .transport(error)
        }
        return registration
    }

    /// How to register `registration` on the current connection.
    func registerAttempts(_ registration: NameRegistration) throws(NameServerError) -> RegisterAttempts {
        try RegisterAttempts(
            registration.name, registration.port, scope: registration.scope,
            held: registrations.withLock { $0.heldName(for: registration.port) }, terms: registration.terms,
            notices: registration.notices)
    }

    /// Keeps the registration of a name the server accepted, or queued.
    func recordRegistration(_ registration: NameRegistration, queued: Bool) -> NameRegistration {
        registration.settle(queued: queued)
        registrations.withLock { $0.record(registration, held: registration.state != .queued) }
        return registration
    }

    /// A notice from the server, on the shared reply loop.
    private func noticed(_ message: Message, _ registration: NameRegistration) {
        var fields = NameFieldReader(message.components)
        switch RegistrationNotice(rawValue: message.id) {
        case .granted?:
            registration.granted()
            registrations.withLock { names in
                if names.byName[registration.name] === registration { names.markHeld(registration) }
            }
        case .replaced?:
            let pid = (try? fields.string()).flatMap { _ in try? fields.pid() } ?? 0
            registrations.withLock { $0.remove(registration) }
            registration.move(to: .takenByAnother(ownerPID: pid))
        case nil:
            break
        }
    }
}

extension NameFieldReader {
    /// Whether a register's ok reply says the registration is queued behind the owner.
    var saysQueued: Bool {
        var fields = self
        return !fields.atEnd && (try? fields.integer()) == 1
    }
}
