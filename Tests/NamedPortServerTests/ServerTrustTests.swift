import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import Testing

/// A client trusts only a server of its own user, root, or a user it names: whatever else
/// listens at an address (another user's impostor) is refused before the client sends it
/// anything, as is a default-address directory another user owns or others may write to.
@Suite("Names: whom a client trusts", .serialized)
struct ServerTrustTests {
    static let nobody = UInt32(65534)
    static let daemon = UInt32(1)

    @Test(.enabled(if: canRunAsNobody, "a server of another user needs root and /usr/bin/setpriv"))
    func aClientRefusesAServerOfAnotherUser() throws {
        try #require(ChildProcessPaths.reachableByEveryone(ChildProcessPaths.helper), "the helper must be executable by nobody")
        let directory = try TestDirectory(ownedBy: Self.nobody)
        let impostor = try SpawnedProcess.helper("names-server", [directory.address, "--open", "--allow-all"], asUser: "nobody")
        defer { impostor.kill() }
        #expect(try impostor.readLine() == "listening on \(directory.address)")

        // Root (this test) connects to nobody's server: refused, naming the address and uid.
        do {
            _ = try NameServerClient.blockingConnect(to: directory.address)
            Issue.record("a server of uid \(Self.nobody) was trusted")
        } catch {
            guard case .untrustedServer(let address, let owner, let reason) = error else {
                Issue.record("connect: \(error)")
                return
            }
            #expect(address == directory.address && owner == Self.nobody)
            #expect(reason.contains("uid \(Self.nobody)") && error.description.contains(directory.address), "\(error)")
        }
        // Nothing reached the impostor as a client: it holds no connection.
        #expect(try waitFor { try counts(impostor).contains("connections=0") })

        // Named as trusted, the same server is used.
        let client = try NameServerClient.blockingConnect(to: directory.address, trustedServerUsers: [Self.nobody])
        #expect(try client.blockingList().isEmpty)
    }

    /// A client that is not root (nobody) and a server of a third user (daemon): refused,
    /// unless the client names daemon as trusted; a server of its own user is accepted.
    @Test(.enabled(if: canRunAsNobody && getpwnam("daemon") != nil, "needs root, setpriv, and the users nobody and daemon"))
    func aClientThatIsNotRootRefusesAThirdUsersServer() throws {
        try #require(ChildProcessPaths.reachableByEveryone(ChildProcessPaths.helper), "the helper must be executable by nobody")
        let directory = try TestDirectory(ownedBy: Self.daemon)
        let server = try SpawnedProcess.helper("names-server", [directory.address, "--open", "--allow-all"], asUser: "daemon")
        defer { server.kill() }
        #expect(try server.readLine() == "listening on \(directory.address)")

        let refused = try SpawnedProcess.helper("names-try", [directory.address, "mine"], asUser: "nobody")
        let lines = try refused.remainingLines()
        #expect(lines.count == 1 && lines[0].hasPrefix("connect: untrustedServer owner=\(Self.daemon) address=\(directory.address):"), "\(lines)")
        #expect(lines.first?.contains("uid \(Self.daemon), neither this user (uid \(Self.nobody))") == true, "\(lines)")

        let trusting = try SpawnedProcess.helper("names-try", [directory.address, "mine", "--trust", "\(Self.daemon)"], asUser: "nobody")
        #expect(try trusting.remainingLines() == ["connect: ok", "register: ok", "lookup: ok", "list: ok"])
        let own = try SpawnedProcess.helper("names-try", [directory.address, "mine"], asUser: "daemon")
        #expect(try own.remainingLines() == ["connect: ok", "register: ok", "lookup: ok", "list: ok"])
    }

    /// The default address's directory (here under a test `XDG_RUNTIME_DIR`) must be this
    /// user's (or root's) and writable by nobody else; a real server listens in it all along.
    @Test(.enabled(if: getuid() == 0, "changing a directory's owner needs root"))
    func aClientRefusesADefaultDirectoryOthersControl() throws {
        let runtime = TestDirectory(mode: 0o755)
        let directory = runtime.path + "/portkit"
        let address = directory + "/" + NameServerAddress.socketFileName
        try #require(mkdir(directory, 0o700) == 0)
        let server = try NameServer.start(at: address)
        defer { server.stop() }
        func attempt() throws -> [String] {
            let client = try SpawnedProcess.spawn(
                ChildProcessPaths.helper, ["names-try", "-", "mine"],
                environment: ["XDG_RUNTIME_DIR": runtime.path, NameServerAddress.environmentVariable: nil])
            return try client.remainingLines()
        }
        // Ours, 0700: used.
        #expect(try attempt() == ["connect: ok", "register: ok", "lookup: ok", "list: ok"])

        // Writable by others: refused, naming the address, the owner and the mode.
        try #require(chmod(directory, 0o777) == 0)
        let open = try attempt()
        #expect(open.count == 1 && open[0].hasPrefix("connect: untrustedServer owner=0 address=\(address):"), "\(open)")
        #expect(open.first?.contains("mode 0777") == true, "\(open)")

        // Another user's, even at 0700: refused.
        try #require(chmod(directory, 0o700) == 0 && chown(directory, Self.nobody, Self.nobody) == 0)
        let foreign = try attempt()
        #expect(foreign.count == 1 && foreign[0].hasPrefix("connect: untrustedServer owner=\(Self.nobody) address=\(address):"), "\(foreign)")
        #expect(foreign.first?.contains("belongs to uid \(Self.nobody)") == true, "\(foreign)")
        try #require(chown(directory, 0, 0) == 0)
    }
}

extension TestDirectory {
    /// A test directory (mode 0755) owned by `uid`, so a server running as that user can
    /// bind its socket there.
    convenience init(ownedBy uid: UInt32) throws {
        self.init(mode: 0o755)
        guard chown(path, uid, uid) == 0 else { throw SpawnedProcess.Failure(description: "chown \(path): \(errno)") }
    }
}
