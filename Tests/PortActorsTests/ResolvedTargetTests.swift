import Distributed
import PortActors
import PortActorsTestActors
import Testing

/// An actor whose targets take each way a served call can go: a non-generic target (its
/// types found once, then kept) returning a value, nothing, or an error, with results that
/// own memory; and a generic one (its types depend on the call: the runtime finds them).
distributed actor Shelf {
    typealias ActorSystem = PortActorSystem

    private var titles: [String] = []

    init(actorSystem: PortActorSystem) {
        self.actorSystem = actorSystem
    }

    distributed func shelve(_ title: String, copies: Int) -> [String] {
        titles += Array(repeating: title, count: copies)
        return titles
    }

    distributed func clear() throws {
        titles = []
    }

    distributed func refuse(_ reason: String) throws -> Point {
        throw Refusal(reason: reason)
    }

    distributed func echo<Value: Codable & Sendable>(_ value: Value) -> [Value] {
        [value, value]
    }
}

@Suite struct ResolvedTargetTests {
    @Test func callsOfEachKindOfTargetComeBackTheSameEveryTime() async throws {
        let names = try TestNames()
        let owner = try names.system()
        defer { owner.shutDown() }
        let caller = try names.system()
        defer { caller.shutDown() }
        let shelf = Shelf(actorSystem: owner)
        try await owner.register(shelf, as: "shelf")
        let remote = try await caller.resolve(name: "shelf", as: Shelf.self)
        #expect(__isRemoteActor(remote))
        // Several rounds: the first call of a target finds its types, the later ones reuse them.
        for round in 1...3 {
            #expect(try await remote.shelve("Dune", copies: 2) == ["Dune", "Dune"])
            #expect(try await remote.shelve("Emma", copies: 1) == ["Dune", "Dune", "Emma"])
            try await remote.clear()
            await #expect(throws: Refusal(reason: "full \(round)")) { try await remote.refuse("full \(round)") }
            #expect(try await remote.echo(round) == [round, round])
            #expect(try await remote.echo("r\(round)") == ["r\(round)", "r\(round)"])
            #expect(try await remote.echo(Point(x: round, y: 0, label: "p")) == [Point(x: round, y: 0, label: "p"), Point(x: round, y: 0, label: "p")])
        }
    }
}
