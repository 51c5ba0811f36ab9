import PermanentThread
import PortMessaging
import PortKitLocks

/// Where a registered name stands, as its `NameRegistration` reports it.
///
/// ```
/// registered ──server lost──▶ serverLost ──registered on the new server──▶ registeredAgain
///                                 ▲   │                                          │
///                                 │   ├──another connection holds it──▶ takenByAnother (final)
///                                 │   └──refused otherwise──▶ failed (final)
///                                 └──────────────server lost again───────────────┘
/// any state but a final one ──unregister, close──▶ released (final)
///
/// queued ──the owner goes──▶ registered          (a standby: `ifTaken: .queue`)
/// registered ──another replaced it──▶ takenByAnother (final; `replaceable: true`)
/// ```
///
/// Only a client that reconnects (`reconnectingOn:`) leaves
/// `registered`; without one, a lost server shows as `connectionLost` at the next call.
public enum NameRegistrationState: Hashable, Sendable, CustomStringConvertible {
    /// The name is held: `register` returned.
    case registered
    /// The server went away (its connection closed); the client is reconnecting, and the
    /// name is held by nobody until it registers it again.
    case serverLost
    /// The client reconnected and registered the name again, with the same port.
    case registeredAgain
    /// While the server was away another connection registered the name; `ownerPID` is its
    /// process. Final: the client no longer tries to register it.
    case takenByAnother(ownerPID: Int32)
    /// The new server refused the name for another reason (`permissionDenied`,
    /// `limitExceeded`, …). Final.
    case failed(NameServerError)
    /// The name was released: `unregister`, or the client was closed. Final.
    case released
    /// Another connection holds the name, and this registration waits behind it as a
    /// standby (`register(…, ifTaken: .queue)`): it becomes `registered` when the owner
    /// goes, in the order the standbys queued. Lookups do not reach its port meanwhile.
    case queued

    /// Whether nothing will change any more.
    public var isFinal: Bool {
        switch self {
        case .registered, .serverLost, .registeredAgain, .queued: return false
        case .takenByAnother, .failed, .released: return true
        }
    }

    /// One word, or a few: `registered`, `server lost`, `registered again`, `taken by
    /// process PID`, `failed: ERROR`, `released`.
    public var description: String {
        switch self {
        case .registered: return "registered"
        case .serverLost: return "server lost"
        case .registeredAgain: return "registered again"
        case .takenByAnother(let pid): return "taken by process \(pid)"
        case .failed(let error): return "failed: \(error)"
        case .released: return "released"
        case .queued: return "queued"
        }
    }
}

/// A name registered through a `NameServerClient`: the name, its port, and where it
/// stands (`state`), which a handler can follow on a loop of the caller's choice
/// (`onStateChange(on:_:)`).
///
/// The client keeps the port alive while the registration lasts. Across a server restart
/// a reconnecting client registers the same port again under the same name; the
/// registration says so (`serverLost`, then `registeredAgain`, or `takenByAnother` when
/// someone else took the name meanwhile).
public final class NameRegistration: Sendable {
    /// The registered name.
    public let name: String
    /// The port lookups of the name are connected to.
    public let port: ReceivePort
    /// How far the name reaches (registered again with the same scope).
    public let scope: NameScope
    /// What to do if the name is taken, whether others may replace it, whom lookups must
    /// come from (sent again with the name after a server restart).
    let terms: RegisterTerms
    /// Where the server says the standby took the name over, or another replaced it
    /// (`RegistrationNotices`); `nil` when the terms need neither.
    let notices: ReceivePort?
    private let record = Locked(Record())

    private struct Record {
        var state = NameRegistrationState.registered
        /// The server granted the name (a standby's takeover) before `register` returned.
        var grantSeen = false
        var observers: [(loop: ThreadLoop, handler: @Sendable (NameRegistrationState) -> Void)] = []
    }

    init(name: String, port: ReceivePort, scope: NameScope, terms: RegisterTerms = RegisterTerms(), notices: ReceivePort? = nil) {
        self.name = name
        self.port = port
        self.scope = scope
        self.terms = terms
        self.notices = notices
    }

    deinit { notices?.invalidate() }

    /// The register's answer: `queued` if it says so, unless the takeover's notice came
    /// first; else `otherwise` (`registeredAgain` after a reconnection; `nil`: stay).
    func settle(queued: Bool, otherwise: NameRegistrationState? = nil) {
        record.withLock { record in
            if queued, !record.grantSeen {
                Self.transition(&record, to: .queued)
            } else if let otherwise {
                Self.transition(&record, to: otherwise)
            }
        }
    }

    /// The server gave the standby the name: `registered` (or noted, if `register` has
    /// not returned yet).
    func granted() {
        record.withLock { record in
            record.grantSeen = true
            if record.state == .queued { Self.transition(&record, to: .registered) }
        }
    }

    /// Where the registration stands now.
    public var state: NameRegistrationState { record.withLock { $0.state } }

    /// Calls `handler` on `loop`'s thread with each later state, in the order the states
    /// were taken (the current one is `state`). Handlers are called until a final state,
    /// that one included. A loop that has ended misses its calls.
    public func onStateChange(
        on loop: ThreadLoop = .current, _ handler: @escaping @Sendable (NameRegistrationState) -> Void
    ) {
        record.withLock { $0.observers.append((loop, handler)) }
    }

    /// Moves to `state` unless the registration has ended, telling the observers; whether
    /// it moved. The calls are performed on their loops under the lock, so that every
    /// observer sees the states in the order they were taken.
    @discardableResult
    func move(to state: NameRegistrationState) -> Bool {
        let moved = record.withLock { Self.transition(&$0, to: state) }
        if moved && state.isFinal { notices?.invalidate() }
        return moved
    }

    /// `move(to:)` under the lock.
    @discardableResult
    private static func transition(_ record: inout Record, to state: NameRegistrationState) -> Bool {
        guard !record.state.isFinal, record.state != state else { return false }
        record.state = state
        // A new server keeps a queue of its own: a grant from the last one says nothing.
        if state == .serverLost { record.grantSeen = false }
        for (loop, handler) in record.observers { try? loop.perform { handler(state) } }
        if state.isFinal { record.observers = [] }
        return true
    }
}
