import Glibc
import PortMessaging
import PortKitLocks

/// Names for ports inside one process: threads register a port under a name and other
/// threads look it up. Everything happens in memory, under one lock: no kernel round trip.
///
/// An entry goes away when its port is invalidated: a lookup never returns an invalid
/// port, and its name is free to register again. (Entries are checked when they are
/// read, so an invalidated port's entry costs nothing until then.)
///
/// ```swift
/// try PortRegistry.shared.register("worker", port: workerPort)
/// let port = try PortRegistry.shared.lookup("worker", waitingUpTo: .seconds(1))
/// ```
///
/// A port registered under a taken name may wait behind it as a standby (`ifTaken:
/// .queue`): when the holder's port is invalidated or removed, the first standby whose
/// port is valid takes the name, in the order they queued. One registered `replaceable`
/// gives way to a later `ifTaken: .replace`.
///
/// For ports that other processes should find, use `NameServerClient.register`.
public final class PortRegistry: Sendable {
    /// The process's registry.
    public static let shared = PortRegistry()

    /// A name's holder, whether it may be replaced, and the standbys behind it.
    private struct Entry {
        var port: SendPort
        var replaceable = false
        var standbys: [(port: SendPort, replaceable: Bool)] = []
    }

    private let entries = ConditionLock<[String: Entry]>([:])

    /// Makes an empty registry (most programs use `shared`).
    public init() {}

    /// Registers `port` under `name`: a lookup returns a send port to it. The argument
    /// order and the port's type are `NameServerClient.register(_:port:)`'s.
    /// - Throws: as `register(_:port:ifTaken:replaceable:)` with a send port.
    @discardableResult
    public func register(
        _ name: String, port: ReceivePort, ifTaken: TakenNamePolicy = .fail, replaceable: Bool = false
    ) throws(NameServerError) -> NameRegistrationState {
        try register(name, port: port.makeSendPort(), ifTaken: ifTaken, replaceable: replaceable)
    }

    /// Registers `port` (a send port: to a port of this process or of another) under `name`.
    /// A name whose port was invalidated is free: the new port takes it.
    /// - Parameters:
    ///   - name: the name.
    ///   - port: the port a lookup returns.
    ///   - ifTaken: when another valid port holds the name: fail, wait behind it, or take
    ///     it from a holder registered `replaceable`.
    ///   - replaceable: whether a later `ifTaken: .replace` may take the name.
    /// - Returns: `registered`, or `queued` behind the holder.
    /// - Throws: `nameTaken` (with this process's pid) if another valid port holds the
    ///   name and `ifTaken` does not get past it; `invalidName` for a name that breaks
    ///   `NameRules`.
    @discardableResult
    public func register(
        _ name: String, port: SendPort, ifTaken: TakenNamePolicy = .fail, replaceable: Bool = false
    ) throws(NameServerError) -> NameRegistrationState {
        try NameRules.validate(name)
        let state = try entries.withLock { (entries) throws(NameServerError) -> NameRegistrationState in
            guard let holder = Self.valid(name, in: &entries).flatMap({ _ in entries[name] }), holder.port !== port else {
                let standbys = entries[name]?.standbys ?? []
                entries[name] = Entry(port: port, replaceable: replaceable, standbys: standbys)
                return .registered
            }
            switch ifTaken {
            case .queue:
                entries[name]?.standbys.append((port, replaceable))
                return .queued
            case .replace where holder.replaceable:
                entries[name]?.port = port
                entries[name]?.replaceable = replaceable
                return .registered
            case .fail, .replace:
                throw .nameTaken(name: name, ownerPID: getpid())
            }
        }
        entries.broadcast()
        return state
    }

    /// The port registered under `name`, or `nil` if there is none (or it was invalidated).
    public func lookup(_ name: String) -> SendPort? {
        entries.withLock { entries in Self.valid(name, in: &entries) }
    }

    /// The port registered under `name`, waiting up to `wait` for it to be registered.
    /// - Throws: `waitTimedOut` when no valid port is registered within `wait`; `invalidName`.
    public func lookup(_ name: String, waitingUpTo wait: Duration) throws(NameServerError) -> SendPort {
        try NameRules.validate(name)
        let found = entries.wait(until: .now + wait) { entries in Self.valid(name, in: &entries) }
        guard let found else { throw .waitTimedOut(operation: "waiting for '\(name)' in the process registry") }
        return found
    }

    /// Removes the entry for `name`; returns the port it held, if it was valid.
    /// The name's first valid standby, if any, takes it.
    @discardableResult
    public func remove(_ name: String) -> SendPort? {
        let port = entries.withLock { entries -> SendPort? in
            guard let entry = entries[name] else { return nil }
            Self.promote(name, in: &entries)
            return entry.port.isValid ? entry.port : nil
        }
        entries.broadcast()
        return port
    }

    /// Removes the entry for `name` only if it holds `port`; returns whether it did.
    @discardableResult
    public func remove(_ name: String, ifHolding port: SendPort) -> Bool {
        let removed = entries.withLock { entries in
            guard entries[name]?.port === port else { return false }
            Self.promote(name, in: &entries)
            return true
        }
        entries.broadcast()
        return removed
    }

    /// The names of valid entries, sorted.
    public var names: [String] {
        entries.withLock { entries in
            for name in Array(entries.keys) { _ = Self.valid(name, in: &entries) }
            return entries.keys.sorted()
        }
    }

    /// The valid port holding `name`: an invalidated holder gives way to its first valid
    /// standby.
    private static func valid(_ name: String, in entries: inout [String: Entry]) -> SendPort? {
        while let entry = entries[name] {
            if entry.port.isValid { return entry.port }
            promote(name, in: &entries)
        }
        return nil
    }

    /// The holder of `name` goes: its first standby whose port is valid takes the name.
    private static func promote(_ name: String, in entries: inout [String: Entry]) {
        guard var entry = entries.removeValue(forKey: name) else { return }
        while !entry.standbys.isEmpty {
            let next = entry.standbys.removeFirst()
            guard next.port.isValid else { continue }
            entries[name] = Entry(port: next.port, replaceable: next.replaceable, standbys: entry.standbys)
            return
        }
    }
}
