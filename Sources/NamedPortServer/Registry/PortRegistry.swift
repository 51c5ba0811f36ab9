import Glibc
import PortMessaging

/// Names for ports inside one process: threads register a port under a name and other
/// threads look it up. Everything happens in memory, under one lock: no kernel round trip.
///
/// An entry goes away when its port is invalidated: a lookup never returns an invalid
/// port, and its name is free to register again. (Entries are checked when they are
/// read, so an invalidated port's entry costs nothing until then.)
///
/// ```swift
/// try PortRegistry.shared.register(workerPort, as: "worker")
/// let port = try PortRegistry.shared.lookup("worker", waitingUpTo: .seconds(1))
/// ```
///
/// For ports that other processes should find, use `NameServerClient.register`.
public final class PortRegistry: Sendable {
    /// The process's registry.
    public static let shared = PortRegistry()

    private let entries = ConditionLock<[String: SendPort]>([:])

    /// Makes an empty registry (most programs use `shared`).
    public init() {}

    /// Registers `port` under `name`.
    /// A name whose port was invalidated is free: the new port takes it.
    /// - Throws: `nameTaken` (with this process's pid) if another valid port holds the
    ///   name; `invalidName` for a name that breaks `NameRules`.
    public func register(_ port: SendPort, as name: String) throws(NameServerError) {
        try NameRules.validate(name)
        try entries.withLock { (entries) throws(NameServerError) in
            if let holder = entries[name], holder.isValid, holder !== port {
                throw .nameTaken(name: name, ownerPID: getpid())
            }
            entries[name] = port
        }
        entries.broadcast()
    }

    /// The port registered under `name`, or `nil` if there is none (or it was invalidated).
    public func lookup(_ name: String) -> SendPort? {
        entries.withLock { entries in Self.valid(name, in: &entries) }
    }

    /// The port registered under `name`, waiting up to `wait` for it to be registered.
    /// - Throws: `timedOut` when no valid port is registered within `wait`; `invalidName`.
    public func lookup(_ name: String, waitingUpTo wait: Duration) throws(NameServerError) -> SendPort {
        try NameRules.validate(name)
        let found = entries.wait(until: .now + wait) { entries in Self.valid(name, in: &entries) }
        guard let found else { throw .timedOut(operation: "waiting for '\(name)' in the process registry") }
        return found
    }

    /// Removes the entry for `name`; returns the port it held, if it was valid.
    @discardableResult
    public func remove(_ name: String) -> SendPort? {
        entries.withLock { entries in
            guard let port = entries.removeValue(forKey: name) else { return nil }
            return port.isValid ? port : nil
        }
    }

    /// Removes the entry for `name` only if it holds `port`; returns whether it did.
    @discardableResult
    public func remove(_ name: String, ifHolding port: SendPort) -> Bool {
        entries.withLock { entries in
            guard entries[name] === port else { return false }
            entries[name] = nil
            return true
        }
    }

    /// The names of valid entries, sorted.
    public var names: [String] {
        entries.withLock { entries in
            entries = entries.filter { $0.value.isValid }
            return entries.keys.sorted()
        }
    }

    private static func valid(_ name: String, in entries: inout [String: SendPort]) -> SendPort? {
        guard let port = entries[name] else { return nil }
        if port.isValid { return port }
        entries[name] = nil
        return nil
    }
}
