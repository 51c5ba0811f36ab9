import PortMessaging

/// The names registered through a client, by name, and which of them the current server
/// connection holds, by port: a port already registered there under one name is
/// registered under the next by naming that one (`registerSame`), not sent again, so the
/// server and the owner keep one connection for all of a port's names.
///
/// `held` is only a hint: a name taken out of it late (released on the server by another
/// thread's call in flight) costs one refused `registerSame`, after which the port is sent.
struct RegisteredNames {
    /// Every registration the client keeps, held or waiting to be registered again.
    private(set) var byName: [String: NameRegistration] = [:]
    /// The names the current connection holds, per port.
    private var held: [ObjectIdentifier: Set<String>] = [:]

    /// A name the current connection holds for `port`, if any.
    func heldName(for port: ReceivePort) -> String? {
        held[ObjectIdentifier(port)]?.first
    }

    /// Keeps `registration`, which the current connection holds (registered, or
    /// registered again) unless it is `queued` behind another (`held` false).
    mutating func record(_ registration: NameRegistration, held: Bool = true) {
        if let replaced = byName.updateValue(registration, forKey: registration.name) { drop(replaced) }
        if held { markHeld(registration) }
    }

    /// Notes that the current connection holds `registration` again.
    mutating func markHeld(_ registration: NameRegistration) {
        held[ObjectIdentifier(registration.port), default: []].insert(registration.name)
    }

    /// Forgets the registration of `name`, and returns it.
    mutating func remove(_ name: String) -> NameRegistration? {
        guard let registration = byName.removeValue(forKey: name) else { return nil }
        drop(registration)
        return registration
    }

    /// Forgets `registration` unless another has taken its name since.
    mutating func remove(_ registration: NameRegistration) {
        guard byName[registration.name] === registration else { return }
        _ = remove(registration.name)
    }

    /// Forgets every registration, and returns them.
    mutating func removeAll() -> [NameRegistration] {
        defer { self = RegisteredNames() }
        return Array(byName.values)
    }

    /// The connection is gone: it holds nothing any more (the registrations stay, to be
    /// registered again).
    mutating func connectionLost() {
        held = [:]
    }

    private mutating func drop(_ registration: NameRegistration) {
        let key = ObjectIdentifier(registration.port)
        guard let index = held.index(forKey: key) else { return }
        held.values[index].remove(registration.name)
        if held.values[index].isEmpty { held.remove(at: index) }
    }
}
