@testable import NamedPortServer
import Testing

/// The name server's table on its own: the rules of names, watches and waiting lookups,
/// with no socket, loop or clock.
@Suite("Names: the server's table")
struct NameTableTests {
    typealias Table = NameTable<Channel, String>

    /// A registration's channel, named for the test.
    final class Channel {
        let label: String
        init(_ label: String) { self.label = label }
    }

    static func owner(_ name: String, pid: Int32 = 10) -> NameOwner { NameOwner(name: name, pid: pid, uid: 1000) }

    static func table(names: Int = 8, watches: Int = 8, waiting: Int = 8) -> Table {
        Table(limits: .init(names: names, watches: watches, waitingLookups: waiting))
    }

    @Test func aNameBelongsToTheClientThatRegisteredIt() throws {
        var table = Self.table()
        try table.register(Self.owner("db", pid: 10), client: 1, channel: Channel("channel-1"))
        #expect(table.holder(of: "db")?.client == 1)
        #expect(table.holder(of: "db")?.channel?.label == "channel-1")
        #expect(throws: NameServerError.nameTaken(name: "db", ownerPID: 10)) {
            try table.register(Self.owner("db", pid: 20), client: 2, channel: nil)
        }
        #expect(throws: NameServerError.notOwner(name: "db", ownerPID: 10)) { _ = try table.unregister("db", client: 2) }
        #expect(throws: NameServerError.notFound(name: "web")) { _ = try table.unregister("web", client: 1) }
        let released = try table.unregister("db", client: 1)
        #expect(released.holder.owner == Self.owner("db", pid: 10))
        #expect(released.channelFreed)
        #expect(table.holder(of: "db") == nil)
        #expect(!table.holdsSomething(1))
    }

    @Test func perClientLimitsCountOnlyThatClient() throws {
        var table = Self.table(names: 2, watches: 1, waiting: 1)
        try table.register(Self.owner("a"), client: 1, channel: nil)
        try table.register(Self.owner("b"), client: 1, channel: nil)
        #expect(throws: NameServerError.limitExceeded(what: "names per connection", limit: 2)) {
            try table.register(Self.owner("c"), client: 1, channel: nil)
        }
        try table.register(Self.owner("c"), client: 2, channel: nil)
        _ = try table.watch(1, client: 1, filter: WatchFilter(text: "", exact: false))
        #expect(throws: NameServerError.limitExceeded(what: "watches per connection", limit: 1)) {
            _ = try table.watch(2, client: 1, filter: WatchFilter(text: "", exact: false))
        }
        _ = try table.addWaiter(for: "x", client: 1, "first")
        #expect(throws: NameServerError.limitExceeded(what: "waiting lookups per connection", limit: 1)) {
            _ = try table.addWaiter(for: "y", client: 1, "second")
        }
        #expect(table.nameCount == 3 && table.watchCount == 1 && table.waiterCount == 1)
    }

    @Test func aWatchSnapshotIsSortedAndItsSubscriptionMatchesByPrefixOrExactly() throws {
        var table = Self.table()
        for name in ["svc.b", "svc.a", "other"] { try table.register(Self.owner(name), client: 1, channel: nil) }
        let snapshot = try table.watch(7, client: 2, filter: WatchFilter(text: "svc.", exact: false))
        #expect(snapshot.map(\.name) == ["svc.a", "svc.b"])
        #expect(throws: NameServerError.protocolError("watch id 7 is in use")) {
            _ = try table.watch(7, client: 2, filter: WatchFilter(text: "", exact: false))
        }
        _ = try table.watch(8, client: 3, filter: WatchFilter(text: "svc.a", exact: true))
        #expect(Set(table.watchers(of: "svc.a")) == [WatchKey(connectionID: 2, watchID: 7), WatchKey(connectionID: 3, watchID: 8)])
        #expect(table.watchers(of: "svc.ab") == [WatchKey(connectionID: 2, watchID: 7)])
        #expect(table.watchers(of: "other").isEmpty)
        table.unwatch(7, client: 2)
        #expect(table.watchers(of: "svc.ab").isEmpty)
        #expect(table.owners.map(\.name) == ["other", "svc.a", "svc.b"])
    }

    @Test func waitersAreTakenInTheOrderTheyCameAndOnlyForTheirName() throws {
        var table = Self.table()
        let first = try table.addWaiter(for: "db", client: 1, "first")
        _ = try table.addWaiter(for: "web", client: 1, "other")
        _ = try table.addWaiter(for: "db", client: 2, "second")
        _ = try table.addWaiter(for: "db", client: 3, "third")
        #expect(table.removeWaiter(first)?.waiting == "first")
        #expect(table.removeWaiter(first) == nil)
        #expect(table.takeWaiters(for: "db").map(\.waiting) == ["second", "third"])
        #expect(table.takeWaiters(for: "db").isEmpty)
        #expect(table.waiterCount == 1)
    }

    @Test func aClientsEndReleasesItsNamesInNameOrderAndEverythingElseItHeld() throws {
        var table = Self.table()
        for name in ["c", "a", "b"] { try table.register(Self.owner(name), client: 1, channel: Channel("ch-\(name)")) }
        try table.register(Self.owner("kept"), client: 2, channel: nil)
        _ = try table.watch(1, client: 1, filter: WatchFilter(text: "", exact: false))
        _ = try table.addWaiter(for: "missing", client: 1, "waits")
        _ = try table.watch(1, client: 2, filter: WatchFilter(text: "", exact: false))
        #expect(table.holdsSomething(1))

        let released = table.release(client: 1)
        #expect(released.holders.map(\.owner.name) == ["a", "b", "c"])
        #expect(released.holders.map(\.channel?.label) == ["ch-a", "ch-b", "ch-c"])
        #expect(released.waiters.map(\.waiting) == ["waits"])
        #expect(!table.holdsSomething(1))
        #expect(table.owners.map(\.name) == ["kept"])
        #expect(table.watchers(of: "anything") == [WatchKey(connectionID: 2, watchID: 1)])
        #expect(table.waiterCount == 0)
        #expect(table.release(client: 1).holders.isEmpty)
    }

    @Test func aChannelHoldsSeveralNamesOfItsClientAndIsFreedWithTheLast() throws {
        var table = Self.table()
        let shared = Channel("shared")
        try table.register(Self.owner("a"), client: 1, channel: shared)
        #expect(try table.channel(of: "a", heldBy: 1) === shared)
        #expect(throws: NameServerError.notOwner(name: "a", ownerPID: 10)) { _ = try table.channel(of: "a", heldBy: 2) }
        #expect(throws: NameServerError.notFound(name: "z")) { _ = try table.channel(of: "z", heldBy: 1) }
        try table.register(Self.owner("b"), client: 1, channel: try table.channel(of: "a", heldBy: 1))
        try table.register(Self.owner("c"), client: 1, channel: shared)
        try table.register(Self.owner("other"), client: 1, channel: Channel("other"))

        let first = try table.unregister("b", client: 1)
        #expect(first.holder.channel === shared && !first.channelFreed)
        #expect(!(try table.unregister("a", client: 1)).channelFreed)
        #expect(try table.unregister("c", client: 1).channelFreed)
        #expect(table.owners.map(\.name) == ["other"])
    }

    @Test func aDeadChannelReleasesEveryNameItHeldInNameOrderAndNoOther() throws {
        var table = Self.table()
        let dead = Channel("dead")
        for name in ["c", "a", "b"] { try table.register(Self.owner(name), client: 1, channel: dead) }
        try table.register(Self.owner("kept"), client: 1, channel: Channel("kept"))
        #expect(table.release(channel: dead).map(\.owner.name) == ["a", "b", "c"])
        #expect(table.release(channel: dead).isEmpty)
        #expect(table.owners.map(\.name) == ["kept"])
        // The names are free again, for anyone.
        try table.register(Self.owner("a", pid: 20), client: 2, channel: Channel("new"))
        #expect(table.holder(of: "a")?.client == 2)
    }

    @Test func aClientsEndFreesItsSharedChannelsWithItsNames() throws {
        var table = Self.table()
        let shared = Channel("shared")
        for name in ["a", "b"] { try table.register(Self.owner(name), client: 1, channel: shared) }
        #expect(table.release(client: 1).holders.map(\.owner.name) == ["a", "b"])
        // The channel holds nothing: a later death of it releases nothing.
        #expect(table.release(channel: shared).isEmpty)
    }
}
