import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// A server that is one node of a cluster tells its directory of the names registered with
/// cluster scope, and refuses such a name another node holds, naming it; a host name is
/// the host's alone.
@Suite("Names: a server asks its cluster's directory")
struct NameDirectoryTests {
    /// A directory whose other nodes hold the names given, recording what it is told.
    private final class FixedDirectory: NameDirectory {
        let held: [String: NameDirectoryHolder]
        let told = Recorder<String>()
        init(held: [String: NameDirectoryHolder]) { self.held = held }
        func holder(of name: String) -> NameDirectoryHolder? { held[name] }
        func nameRegistered(_ owner: NameOwner) { told.append("+\(owner.name) \(owner.pid)") }
        func nameReleased(_ owner: NameOwner) { told.append("-\(owner.name)") }
    }

    /// A server whose directory says node east-1's process 4242 holds "db", and a client.
    private struct Fixture {
        let directory = TestDirectory()
        let held = FixedDirectory(held: ["db": NameDirectoryHolder(node: "east-1", pid: 4242)])
        let server: NameServer
        let names: NameServerClient

        init() throws {
            server = try NameServer.start(at: directory.address, directory: held)
            do { names = try NameServerClient.blockingConnect(to: directory.address) } catch {
                server.stop()
                throw error
            }
        }

        func stop() {
            names.close()
            server.stop()
        }
    }

    @Test func aClusterNameAnotherNodeHoldsIsRefusedNamingTheNodeAndOthersArePublished() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let (held, names) = (fixture.held, fixture.names)
        let ports = PortLoop()

        #expect(throws: NameServerError.nameTakenElsewhere(name: "db", node: "east-1", ownerPID: 4242)) {
            try names.blockingRegister("db", port: try ports.port(), scope: .cluster)
        }
        #expect("\(NameServerError.nameTakenElsewhere(name: "db", node: "east-1", ownerPID: 4242))"
            == "name 'db' is taken by process 4242 on node east-1")
        let cache = try names.blockingRegister("cache", port: try ports.port(), scope: .cluster)
        #expect(cache.scope == .cluster)
        #expect(try names.blockingList().map(\.name) == ["cache"])
        #expect(eventually { held.told.all == ["+cache \(getpid())"] })
        try names.blockingUnregister("cache")
        #expect(eventually { held.told.all == ["+cache \(getpid())", "-cache"] })
    }

    /// A host name is neither published nor refused for another node's holding it; a
    /// cluster name its owner's death releases is withdrawn.
    @Test func aHostNameStaysHereAndADeadOwnersClusterNameIsWithdrawn() throws {
        let fixture = try Fixture()
        defer { fixture.stop() }
        let (held, names) = (fixture.held, fixture.names)
        let ports = PortLoop()
        let local = try names.blockingRegister("db", port: try ports.port())
        #expect(local.scope == .host)
        #expect(try names.blockingOwner(of: "db").pid == getpid())

        let owner = try SpawnedProcess.helper("names-owner", [fixture.directory.address, "shared", "--cluster"])
        #expect(try owner.readLine(within: .seconds(60)) == "serving shared \(owner.pid)")
        #expect(eventually(timeout: .seconds(30)) { held.told.all == ["+shared \(owner.pid)"] })
        owner.kill()
        #expect(eventually(timeout: .seconds(30)) { held.told.all == ["+shared \(owner.pid)", "-shared"] })
    }
}
