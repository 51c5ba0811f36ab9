import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// A server short of resources says so: clients it cannot take are told `serverBusy` at
/// once (not left to time out in its backlog), a lookup it cannot broker answers
/// `serverBusy`, and users its policy refuses are closed at once without counting against
/// its connection limit.
@Suite("Names: a server short of resources", .serialized)
struct ServerResourcesTests {
    /// A server child with a low RLIMIT_NOFILE, filled with connections until it runs out.
    @Test func aServerOutOfDescriptorsAnswersBusy() throws {
        let directory = TestDirectory()
        let server = try SpawnedProcess.helper("names-server", [directory.address, "--nofile", "64"])
        defer { server.kill() }
        #expect(try server.readLine() == "listening on \(directory.address)")
        let loop = PortLoop()
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        let receiver = try loop.port { Array("x: \($0.text)".utf8) }
        try owner.blockingRegister("x", port: receiver)
        let looker = try NameServerClient.blockingConnect(to: directory.address)

        // Connect until the server has no descriptor left: the next client is told at once.
        // A generous timeout: a client left in the backlog would show as `timedOut`.
        var fillers: [NameServerClient] = []
        var refusal: NameServerError?
        while refusal == nil && fillers.count < 200 {
            do {
                // The first call takes the hello's answer: the refusal, if the server had to.
                let filler = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(60))
                _ = try filler.blockingList()
                fillers.append(filler)
            } catch {
                refusal = error
            }
        }
        guard case .serverBusy(let address, let reason)? = refusal else {
            Issue.record("after \(fillers.count) connections: \(String(describing: refusal))")
            return
        }
        #expect(address == directory.address && reason.contains("out of descriptors"), "\(reason)")
        // Again, for a second client: the spare descriptor is taken back each time.
        #expect(throws: NameServerError.serverBusy(address: directory.address, reason: reason)) {
            try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(60)).blockingList()
        }

        // A lookup needs a socket pair: refused as busy, and the connection stays usable.
        do {
            _ = try looker.blockingLookup("x")
            Issue.record("a lookup was brokered with no descriptor to spare")
        } catch {
            guard case .serverBusy(let address, let reason) = error else {
                Issue.record("lookup: \(error)")
                return
            }
            #expect(address == directory.address && reason.contains("'x'"), "\(reason)")
        }
        #expect(try looker.blockingOwner(of: "x").pid == getpid())

        // A register whose port the server cannot take is refused as busy: the owner's
        // connection stays, and with it the name it holds.
        let second = try loop.port { Array("y: \($0.text)".utf8) }
        #expect(throws: NameServerError.serverBusy(address: directory.address, reason: "out of descriptors for the request's port")) {
            try owner.blockingRegister("y", port: second)
        }
        #expect(try looker.blockingOwner(of: "x").pid == getpid())
        #expect(throws: NameServerError.notFound(name: "y")) { try looker.blockingOwner(of: "y") }

        // Room again: everything works.
        for filler in fillers { filler.close() }
        fillers = []
        #expect(try waitFor(.seconds(60)) { try counts(server).contains("connections=2 ") })
        let port = try looker.blockingLookup("x")
        #expect(try ask(port, "hi") == "x: hi")
        port.invalidate()
        try owner.blockingRegister("y", port: second)
        let other = try looker.blockingLookup("y")
        #expect(try ask(other, "hi") == "y: hi")
        other.invalidate()
        second.invalidate()
        receiver.invalidate()
    }

    /// Connections of a user the policy refuses are closed at once (after being told why):
    /// they never fill the connection limit.
    @Test(.enabled(if: canRunAsNobody, "a client of another user needs root and /usr/bin/setpriv"))
    func refusedUsersAreClosedAtOnceAndNotCounted() throws {
        try #require(ChildProcessPaths.reachableByEveryone(ChildProcessPaths.helper), "the helper must be executable by nobody")
        let directory = TestDirectory(mode: 0o755)
        let server = try SpawnedProcess.helper("names-server", [directory.address, "--open", "--max-connections", "2"])
        defer { server.kill() }
        #expect(try server.readLine() == "listening on \(directory.address)")

        let squatter = try SpawnedProcess.helper("names-squat", [directory.address, "6"], asUser: "nobody")
        defer { squatter.kill() }
        #expect(try squatter.readLine() == "connected 6")
        #expect(try squatter.readLine(within: .seconds(90)) == "closed 6")
        #expect(try counts(server).contains("connections=0 "))

        // The limit is still whole for admitted users, and the one past it is told so.
        let first = try NameServerClient.blockingConnect(to: directory.address)
        let second = try NameServerClient.blockingConnect(to: directory.address)
        #expect(throws: NameServerError.serverBusy(address: directory.address, reason: "limit reached: at most 2 connections")) {
            try NameServerClient.blockingConnect(to: directory.address).blockingList()
        }
        #expect(try first.blockingList().isEmpty && second.blockingList().isEmpty)
    }
}
