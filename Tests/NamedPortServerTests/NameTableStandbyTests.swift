@testable import NamedPortServer
import Testing

/// The table's standbys on their own: the queue's order, who leaves it, and the limit.
@Suite("Names: standbys in the server's table")
struct NameTableStandbyTests {
    typealias Table = NameTableTests.Table
    typealias Channel = NameTableTests.Channel

    private func standby(_ name: String, client: UInt64) -> Table.Holder {
        Table.Holder(
            owner: NameTableTests.owner(name, pid: Int32(client) * 10), client: client, channel: Channel("c\(client)"),
            terms: RegisterTerms(ifTaken: .queue))
    }

    @Test func standbysTakeTheNameInTheOrderTheyQueued() throws {
        var table = NameTableTests.table()
        try table.register(NameTableTests.owner("db", pid: 10), client: 1, channel: Channel("c1"))
        #expect(try table.enqueue(standby("db", client: 2)) == 1)
        #expect(try table.enqueue(standby("db", client: 3)) == 2)
        #expect(throws: NameServerError.nameTaken(name: "db", ownerPID: 10)) { _ = try table.enqueue(standby("db", client: 2)) }
        #expect(table.promoteStandby(for: "db") == nil, "the holder still holds it")

        let released = table.release(client: 1)
        #expect(released.holders.map(\.owner.name) == ["db"])
        #expect(table.promoteStandby(for: "db")?.client == 2)
        #expect(table.holder(of: "db")?.owner.pid == 20)
        #expect(table.standbys(of: "db").map(\.client) == [3])
        #expect(table.release(channel: try #require(table.holder(of: "db")?.channel)).map(\.client) == [2])
        #expect(table.promoteStandby(for: "db")?.client == 3)
        #expect(table.standbys(of: "db").isEmpty)
    }

    @Test func aGoneStandbyLeavesTheQueueAndQueuedNamesCountAgainstTheLimit() throws {
        var table = NameTableTests.table(names: 1)
        try table.register(NameTableTests.owner("a"), client: 1, channel: Channel("c1"))
        try table.register(NameTableTests.owner("b"), client: 2, channel: Channel("c2"))
        #expect(try table.enqueue(standby("a", client: 3)) == 1)
        #expect(throws: NameServerError.limitExceeded(what: "names per connection", limit: 1)) {
            _ = try table.enqueue(standby("b", client: 3))
        }
        let second = standby("a", client: 4)
        _ = try table.enqueue(second)
        #expect(table.dropStandbys(client: 3).map(\.client) == [3])
        #expect(table.dropStandbys(channel: try #require(second.channel)).map(\.client) == [4])
        _ = table.release(client: 1)
        #expect(table.promoteStandby(for: "a") == nil)
        #expect(table.leaveQueue("b", client: 9) == nil)
    }
}
