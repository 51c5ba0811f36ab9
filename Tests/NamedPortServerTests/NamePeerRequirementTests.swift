import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// An owner's peer requirement: the server refuses a lookup from a process that does not
/// meet it, with a typed error, and answers one that does.
@Suite("Peer requirements of a name", .serialized)
struct NamePeerRequirementTests {
    @Test func aLookerThatIsNotTheNamedExecutableIsRefusedAndOneThatIsAdmitted() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let loop = PortLoop()
        let port = try loop.port { _ in Array("ok".utf8) }
        let portname = URL(fileURLWithPath: ChildProcessPaths.portname).resolvingSymlinksInPath().path
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        try owner.blockingRegister("guarded", port: port, requiring: .sameUser.and(.executable(portname)))

        // `portname lookup`, a process of the named executable: admitted.
        let admitted = try SpawnedProcess.spawn(portname, ["--address", directory.address, "lookup", "guarded"])
        #expect(try admitted.readLine() == "\(getpid())")
        #expect(try admitted.wait() == .exited(0))

        // The test helper, another executable: refused, and `portname`'s twin says so.
        let (status, output) = try ChildProcess.run("names-request", [directory.address, "guarded", "hi", "0"])
        #expect(status != 0, "helper said: \(output)")
        #expect(output.contains("refuses this process: executable"), "helper said: \(output)")

        // This process, in its own call: the typed error the caller can match.
        let looker = try NameServerClient.blockingConnect(to: directory.address)
        do {
            _ = try looker.blockingLookup("guarded")
            Issue.record("the lookup was answered")
        } catch {
            guard case .peerRequirementNotMet(let name, let reason) = error else {
                Issue.record("expected peerRequirementNotMet, got \(error)")
                return
            }
            #expect(name == "guarded")
            #expect(reason.contains("is not \(portname)"), "\(reason)")
        }
        // The owner's query still answers (only a connection to the owner is guarded).
        #expect(try looker.blockingOwner(of: "guarded").pid == getpid())
    }

    @Test func aUIDTheLookerIsNotRefusesItAndAPredicateCannotTravel() async throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let loop = PortLoop()
        let port = try loop.port { _ in Array("ok".utf8) }
        let owner = try await NameServerClient.connect(to: directory.address)
        try await owner.register("others", port: port, requiring: .uids([getuid() &+ 1]))
        try await owner.register("mine", port: port, requiring: .uids([getuid()]))
        await #expect(throws: NameServerError.peerRequirementNotMet(
            name: "others", reason: "uid \(getuid()) is not in [\(getuid() &+ 1)]")) {
            _ = try await owner.lookup("others")
        }
        let mine = try await owner.lookup("mine")
        #expect(try mine.blockingRequest(Message(id: 1, text: "hi"), receiveTimeout: .seconds(30)).text == "ok")
        mine.invalidate()
        await #expect(throws: NameServerError.requirementCannotTravel(requirement: "matching anything")) {
            try await owner.register("never", port: port, requiring: .matching("anything") { _ in true })
        }
    }
}
