/// Standbys: registrations queued behind a name's holder, which take the name over, in the
/// order they queued, when the holder goes. Pure state, like the rest of the table: the
/// server calls `promoteStandby(for:)` after each release and tells the one promoted.
extension NameTable {
    /// Refuses a name (held or queued) past the client's limit of names.
    func checkNameLimit(_ client: UInt64) throws(NameServerError) {
        let queued = standbys.values.reduce(0) { count, queue in count + queue.count { $0.client == client } }
        guard (holdings[client]?.names.count ?? 0) + queued < limits.names else {
            throw .limitExceeded(what: "names per connection", limit: limits.names)
        }
    }

    /// Queues `standby` behind the holder of its name (which must be held by another
    /// client); returns its place, 1 for the first.
    mutating func enqueue(_ standby: Holder) throws(NameServerError) -> Int {
        let name = standby.owner.name
        guard let holder = holders[name] else { throw .notFound(name: name) }
        if holder.client == standby.client || standbys[name]?.contains(where: { $0.client == standby.client }) == true {
            throw .nameTaken(name: name, ownerPID: holder.owner.pid)
        }
        try checkNameLimit(standby.client)
        standbys[name, default: []].append(standby)
        return standbys[name]?.count ?? 1
    }

    /// The standbys queued for `name`, in order.
    func standbys(of name: String) -> [Holder] { standbys[name] ?? [] }

    /// Makes the first standby of `name` its holder, if the name is free and one waits;
    /// returns it. The caller checks that its port still lives (else releases it again).
    mutating func promoteStandby(for name: String) -> Holder? {
        guard holders[name] == nil, var queue = standbys.removeValue(forKey: name), !queue.isEmpty else { return nil }
        let standby = queue.removeFirst()
        if !queue.isEmpty { standbys[name] = queue }
        holders[name] = standby
        holdings[standby.client, default: Holdings()].names.insert(name)
        if let channel = standby.channel { namesByChannel[ObjectIdentifier(channel), default: []].insert(name) }
        return standby
    }

    /// Takes `client`'s standby for `name` out of its queue (its `unregister`).
    mutating func leaveQueue(_ name: String, client: UInt64) -> Holder? {
        dropStandbys(for: [name]) { $0.client == client }.first
    }

    /// Takes every standby of `client` out of the queues (its connection ended).
    mutating func dropStandbys(client: UInt64) -> [Holder] {
        dropStandbys(for: Array(standbys.keys)) { $0.client == client }
    }

    /// Takes every standby whose port is `channel` out of the queues (the port died).
    mutating func dropStandbys(channel: Channel) -> [Holder] {
        dropStandbys(for: Array(standbys.keys)) { $0.channel === channel }
    }

    private mutating func dropStandbys(for names: [String], where leaves: (Holder) -> Bool) -> [Holder] {
        var dropped: [Holder] = []
        for name in names.sorted() {
            guard var queue = standbys[name] else { continue }
            dropped += queue.filter(leaves)
            queue.removeAll(where: leaves)
            standbys[name] = queue.isEmpty ? nil : queue
        }
        return dropped
    }
}
