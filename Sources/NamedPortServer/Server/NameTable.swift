/// The name server's table: which client holds which name, which lookups wait for a name,
/// which watches see it. Pure state and rules, no I/O, no clock, no loop: each change
/// returns what the server must then tell others (watchers, waiting lookups), and the
/// server does the telling. A client is the server's number for one connection.
///
/// `Channel` is what a registration keeps to reach the owner's port; `Waiting` is what a
/// waiting lookup keeps to be answered. One channel may hold several names of one client
/// (a port registered under each): it is let go with the last of them.
struct NameTable<Channel: AnyObject, Waiting> {
    /// Who holds a name, and how to reach its port.
    struct Holder {
        var owner: NameOwner
        var client: UInt64
        var channel: Channel?
        /// What the owner asked (replaceable, its peer requirement) and where it is told
        /// of a takeover (`NameTable+Standby`).
        var terms = RegisterTerms()
        var notices: Channel?
    }

    /// A lookup waiting for its name to be registered.
    struct Waiter {
        let id: UInt64
        let name: String
        let client: UInt64
        let waiting: Waiting
    }

    /// What one client holds: its names, its watches (by the id it chose), its waiters.
    struct Holdings {
        var names: Set<String> = []
        var watches: [UInt64: WatchFilter] = [:]
        var waiters: Set<UInt64> = []

        var isEmpty: Bool { names.isEmpty && watches.isEmpty && waiters.isEmpty }
    }

    /// The limits per client, from the server's policy.
    struct Limits {
        var names: Int
        var watches: Int
        var waitingLookups: Int
    }

    let limits: Limits
    // Internal, not private, only so that the table's other file (standbys) reaches them.
    var holders: [String: Holder] = [:]
    var holdings: [UInt64: Holdings] = [:]
    /// The standbys queued behind each name's holder, in the order they queued.
    var standbys: [String: [Holder]] = [:]
    private var watches: [WatchKey: WatchFilter] = [:]
    private var waitersByName: [String: [UInt64]] = [:]
    private var waiters: [UInt64: Waiter] = [:]
    private var nextWaiterID: UInt64 = 1
    /// The names each channel holds.
    var namesByChannel: [ObjectIdentifier: Set<String>] = [:]

    init(limits: Limits) {
        self.limits = limits
    }

    // MARK: Reading

    /// The holder of `name`, if it is registered.
    func holder(of name: String) -> Holder? { holders[name] }

    /// Every owner, sorted by name (as `list` answers).
    var owners: [NameOwner] { holders.values.map(\.owner).sorted { $0.name < $1.name } }

    /// How many names, watches and waiting lookups the table holds.
    var nameCount: Int { holders.count }
    var watchCount: Int { watches.count }
    var waiterCount: Int { waiters.count }

    /// Whether `client` holds a name, a watch or a waiting lookup.
    func holdsSomething(_ client: UInt64) -> Bool { !(holdings[client]?.isEmpty ?? true) }

    // MARK: Names

    /// Registers `owner.name` for `client`; the watches to tell it appeared, in no
    /// particular order, are `watchers(of:)`'s afterwards.
    mutating func register(
        _ owner: NameOwner, client: UInt64, channel: Channel?, terms: RegisterTerms = RegisterTerms(), notices: Channel? = nil
    ) throws(NameServerError) {
        if let holder = holders[owner.name] { throw .nameTaken(name: owner.name, ownerPID: holder.owner.pid) }
        try checkNameLimit(client)
        holders[owner.name] = Holder(owner: owner, client: client, channel: channel, terms: terms, notices: notices)
        holdings[client, default: Holdings()].names.insert(owner.name)
        if let channel { namesByChannel[ObjectIdentifier(channel), default: []].insert(owner.name) }
    }

    /// The channel of `name`, which `client` must hold (to register another name with it).
    func channel(of name: String, heldBy client: UInt64) throws(NameServerError) -> Channel? {
        holders.values[try index(of: name, heldBy: client)].channel
    }

    /// Releases `name`, which `client` must hold; returns its holder, and whether that was
    /// the last name of its channel (which nothing then holds).
    mutating func unregister(_ name: String, client: UInt64) throws(NameServerError) -> (holder: Holder, channelFreed: Bool) {
        // Found once by its index: a name is hashed once to find it and take it out.
        let index = try index(of: name, heldBy: client)
        let holder = holders.values[index]
        holders.remove(at: index)
        holdings[client]?.names.remove(name)
        return (holder, forget(name, of: holder.channel))
    }

    /// Releases every name `channel` holds (its port died); their holders, in name order.
    mutating func release(channel: Channel) -> [Holder] {
        guard let names = namesByChannel.removeValue(forKey: ObjectIdentifier(channel)) else { return [] }
        var released: [Holder] = []
        for name in names.sorted() {
            guard let index = holders.index(forKey: name), holders.values[index].channel === channel else { continue }
            let holder = holders.remove(at: index).value
            holdings[holder.client]?.names.remove(name)
            released.append(holder)
        }
        return released
    }

    /// Where `name` is in `holders`: `notFound` if no one holds it, `notOwner` if not `client`.
    private func index(of name: String, heldBy client: UInt64) throws(NameServerError) -> [String: Holder].Index {
        guard let index = holders.index(forKey: name) else { throw .notFound(name: name) }
        let holder = holders.values[index]
        guard holder.client == client else { throw .notOwner(name: name, ownerPID: holder.owner.pid) }
        return index
    }

    /// Takes `name` out of its channel's names; whether the channel holds none now.
    private mutating func forget(_ name: String, of channel: Channel?) -> Bool {
        guard let channel else { return false }
        let key = ObjectIdentifier(channel)
        guard let index = namesByChannel.index(forKey: key) else { return true }
        namesByChannel.values[index].remove(name)
        guard namesByChannel.values[index].isEmpty else { return false }
        namesByChannel.remove(at: index)
        return true
    }

    // MARK: Watches

    /// Starts watch `watchID` of `client`; returns the current owners it matches, sorted
    /// by name. The snapshot and the subscription are one step: no change falls between.
    mutating func watch(_ watchID: UInt64, client: UInt64, filter: WatchFilter) throws(NameServerError) -> [NameOwner] {
        let current = holdings[client]?.watches ?? [:]
        guard current[watchID] == nil else { throw .protocolError("watch id \(watchID) is in use") }
        guard current.count < limits.watches else {
            throw .limitExceeded(what: "watches per connection", limit: limits.watches)
        }
        holdings[client, default: Holdings()].watches[watchID] = filter
        watches[WatchKey(connectionID: client, watchID: watchID)] = filter
        return holders.values.map(\.owner).filter { filter.matches($0.name) }.sorted { $0.name < $1.name }
    }

    /// Ends watch `watchID` of `client` (nothing if there is none).
    mutating func unwatch(_ watchID: UInt64, client: UInt64) {
        holdings[client]?.watches[watchID] = nil
        watches[WatchKey(connectionID: client, watchID: watchID)] = nil
    }

    /// The watches that see a change of `name`.
    func watchers(of name: String) -> [WatchKey] {
        watches.compactMap { key, filter in filter.matches(name) ? key : nil }
    }

    // MARK: Waiting lookups

    /// Parks a lookup of `name` for `client`; returns the waiter's id.
    mutating func addWaiter(for name: String, client: UInt64, _ waiting: Waiting) throws(NameServerError) -> UInt64 {
        guard (holdings[client]?.waiters.count ?? 0) < limits.waitingLookups else {
            throw .limitExceeded(what: "waiting lookups per connection", limit: limits.waitingLookups)
        }
        let waiter = Waiter(id: nextWaiterID, name: name, client: client, waiting: waiting)
        nextWaiterID += 1
        waiters[waiter.id] = waiter
        waitersByName[name, default: []].append(waiter.id)
        holdings[client, default: Holdings()].waiters.insert(waiter.id)
        return waiter.id
    }

    /// Takes waiter `id` out of the table (answered, or timed out).
    mutating func removeWaiter(_ id: UInt64) -> Waiter? {
        guard let waiter = waiters.removeValue(forKey: id) else { return nil }
        waitersByName[waiter.name]?.removeAll { $0 == id }
        if waitersByName[waiter.name]?.isEmpty == true { waitersByName[waiter.name] = nil }
        holdings[waiter.client]?.waiters.remove(id)
        return waiter
    }

    /// Takes every lookup waiting for `name` (that `include` accepts) out of the table, in
    /// the order they came.
    mutating func takeWaiters(for name: String, where include: (Waiting) -> Bool = { _ in true }) -> [Waiter] {
        guard let ids = waitersByName[name] else { return [] }
        return ids.compactMap { id in waiters[id].map { include($0.waiting) } == true ? removeWaiter(id) : nil }
    }

    // MARK: Clients

    /// What a client's end released: the waiters dropped, and the names it held with their
    /// holders, in name order (so watchers hear of them in that order). Their channels are
    /// held by nothing any more.
    struct Released {
        var waiters: [Waiter] = []
        var holders: [Holder] = []
    }

    /// Forgets everything `client` held (its standbys: `dropStandbys(client:)`).
    mutating func release(client: UInt64) -> Released {
        guard let held = holdings.removeValue(forKey: client) else { return Released() }
        var released = Released()
        for id in held.waiters.sorted() {
            if let waiter = removeWaiter(id) { released.waiters.append(waiter) }
        }
        for watchID in held.watches.keys { watches[WatchKey(connectionID: client, watchID: watchID)] = nil }
        for name in held.names.sorted() {
            guard let holder = holders.removeValue(forKey: name) else { continue }
            _ = forget(name, of: holder.channel)
            released.holders.append(holder)
        }
        return released
    }

    /// Empties the table; returns every holder and waiter it had.
    mutating func removeAll() -> Released {
        let queued = standbys.values.flatMap { $0 }
        let released = Released(waiters: Array(waiters.values), holders: Array(holders.values) + queued)
        self = NameTable(limits: limits)
        return released
    }
}

/// A watch, keyed for the server's table.
struct WatchKey: Hashable {
    var connectionID: UInt64
    var watchID: UInt64
}

/// What a watch matches: names starting with a prefix, or one name exactly.
struct WatchFilter {
    var text: String
    var exact: Bool

    /// Byte-wise, as names are compared.
    func matches(_ name: String) -> Bool {
        exact ? name.utf8.elementsEqual(text.utf8) : name.utf8.starts(with: text.utf8)
    }
}
