import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitSystem

/// `portnamed` and `portname` as scripts see them: output shapes, exit statuses, the
/// address rules, a second server, a stale socket, systemd socket activation.
@Suite("portnamed and portname", .serialized)
struct CommandLineTests {
    private func startDaemon(_ address: String, environment: [String: String?] = [:]) throws -> SpawnedProcess {
        let daemon = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", address], environment: environment)
        #expect(try daemon.readLine() == "listening on \(address)")
        return daemon
    }

    /// Runs `portname arguments…` to the end: (exit status, stdout lines, stderr).
    private func portname(
        _ arguments: [String], environment: [String: String?] = [:]
    ) throws -> (status: SpawnedProcess.Termination, lines: [String], error: String) {
        let child = try SpawnedProcess.spawn(ChildProcessPaths.portname, arguments, environment: environment)
        let lines = try child.remainingLines(within: .seconds(60))
        let status = try child.wait(within: .seconds(60))
        return (status, lines, child.standardError())
    }

    @Test func aSecondPortnamedRefusesALiveAddressAndTheFirstCleansUp() throws {
        let directory = TestDirectory()
        let first = try startDaemon(directory.address)
        let second = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", directory.address])
        #expect(try second.wait() == .exited(1))
        #expect(second.standardError().contains("already running at \(directory.address)"))
        // The first one still serves.
        #expect(try portname(["--address", directory.address, "list"]).status == .exited(0))
        first.signal(SIGTERM)
        #expect(try first.wait() == .exited(0))
        #expect(!FileManager.default.fileExists(atPath: directory.address))
        #expect(!FileManager.default.fileExists(atPath: directory.address + ".lock"))
    }

    @Test func portnamedReplacesAStaleSocketFile() throws {
        let directory = TestDirectory()
        let crashed = try startDaemon(directory.address)
        crashed.signal(SIGKILL)
        #expect(try crashed.wait() == .signalled(SIGKILL))
        #expect(FileManager.default.fileExists(atPath: directory.address))
        #expect(try portname(["--address", directory.address, "list"]).status == .exited(5))

        let next = try startDaemon(directory.address)
        defer { next.kill() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        #expect(client.serverPID == next.pid)
    }

    @Test func portnamedServesASocketFromSystemdAndIsNotDisplaced() throws {
        let directory = TestDirectory()
        // What systemd does: bind and listen, then start the service with it as fd 3.
        let listening = try UnixSocket.make(nonBlocking: false)
        defer { try? listening.close() }
        try UnixSocket.bind(listening, to: directory.address)
        try UnixSocket.listen(listening, backlog: 16)
        let daemon = try SpawnedProcess.spawn(
            ChildProcessPaths.portnamed, [], environment: ["PORTKIT_NAME_SERVER": "/nonexistent/elsewhere.sock"],
            descriptors: [3: listening.rawValue], viaShell: "export LISTEN_PID=$$ LISTEN_FDS=1; exec")
        defer { daemon.kill() }
        #expect(try daemon.readLine() == "listening on \(directory.address)")
        let client = try NameServerClient.blockingConnect(to: directory.address)
        #expect(client.serverPID == daemon.pid)

        // No lock file is held for a socket systemd owns, but the address answers: a
        // second server there refuses to start.
        let second = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", directory.address])
        #expect(try second.wait() == .exited(1))
        #expect(second.standardError().contains("already running"))
        daemon.signal(SIGTERM)
        #expect(try daemon.wait() == .exited(0))
        // systemd's socket file is left to systemd.
        #expect(FileManager.default.fileExists(atPath: directory.address))
    }

    @Test func theDefaultAddressIsAPrivateDirectoryUnderTheRuntimeDirectory() throws {
        let runtime = TestDirectory()
        let environment: [String: String?] = ["XDG_RUNTIME_DIR": runtime.path, "PORTKIT_NAME_SERVER": nil]
        let daemon = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, [], environment: environment)
        defer { daemon.kill() }
        let expected = runtime.path + "/portkit/names.sock"
        #expect(try daemon.readLine() == "listening on \(expected)")
        #expect(try FileSystem.status(runtime.path + "/portkit").permissions == 0o700)
        #expect(try FileSystem.status(expected).permissions == 0o600)
        // portname finds it the same way, and PORTKIT_NAME_SERVER points elsewhere.
        #expect(try portname(["list"], environment: environment).status == .exited(0))
        let pointed = try portname(["list"], environment: ["PORTKIT_NAME_SERVER": expected])
        #expect(pointed.status == .exited(0))
        daemon.signal(SIGTERM)
        #expect(try daemon.wait() == .exited(0))

        // A default directory others can enter is refused, not used.
        chmod(runtime.path + "/portkit", 0o755)
        let refused = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, [], environment: environment)
        #expect(try refused.wait() == .exited(1))
        #expect(refused.standardError().contains("must be 0700"))
    }

    @Test func portnameCommandsKeepTheirShape() throws {
        let directory = TestDirectory()
        // The server in a helper child, which can say when a lookup is waiting.
        let daemon = try startServer(directory)
        defer { daemon.kill() }
        let address = ["--address", directory.address]
        let uid = getuid()

        let empty = try portname(address + ["list"])
        #expect(empty.status == .exited(0) && empty.lines.isEmpty)

        let owner = try SpawnedProcess.helper("names-owner", [directory.address, "cli.one"])
        defer { owner.kill() }
        #expect(try owner.readLine() == "serving cli.one \(owner.pid)")

        // The global option may come after the command too.
        let listed = try portname(["list"] + address)
        #expect(listed.status == .exited(0) && listed.lines == ["cli.one\t\(owner.pid)\t\(uid)"])
        let looked = try portname(address + ["lookup", "cli.one"])
        #expect(looked.status == .exited(0) && looked.lines == ["\(owner.pid)"])
        let missing = try portname(address + ["lookup", "nope"])
        #expect(missing.status == .exited(1) && missing.lines.isEmpty)
        #expect(missing.error.split(separator: "\n").count == 1 && missing.error.contains("nope"), "\(missing.error)")
        let waitedInVain = try portname(address + ["lookup", "nope", "--wait", "0.2"])
        #expect(waitedInVain.status == .exited(1))

        // lookup --wait: answered when the name appears.
        let waiting = try SpawnedProcess.spawn(ChildProcessPaths.portname, address + ["lookup", "cli.two", "--wait", "60"])
        #expect(try waitFor { try counts(daemon).contains("waiting=1") })
        let second = try SpawnedProcess.helper("names-owner", [directory.address, "cli.two"])
        defer { second.kill() }
        #expect(try waiting.readLine() == "\(second.pid)")
        #expect(try waiting.wait() == .exited(0))

        let sent = try portname(address + ["send", "cli.one", "--id", "5", "hello there"])
        #expect(sent.status == .exited(0) && sent.lines == ["\(owner.pid) hello there"])
        #expect(try portname(address + ["send", "nope", "x"]).status == .exited(1))

        let server = try SpawnedProcess.spawn(ChildProcessPaths.portname, address + ["serve", "cli.echo", "--echo"])
        defer { server.kill() }
        #expect(try server.readLine() == "serving cli.echo")
        let echoed = try portname(address + ["send", "cli.echo", "abc def"])
        #expect(echoed.status == .exited(0) && echoed.lines == ["abc def"])

        let slow = try SpawnedProcess.helper("names-owner", [directory.address, "cli.slow", "--slow"])
        defer { slow.kill() }
        _ = try slow.readLine()
        let timedOut = try portname(address + ["send", "cli.slow", "--timeout", "0.3", "x"])
        #expect(timedOut.status == .exited(3))

        let dying = try SpawnedProcess.helper("names-owner", [directory.address, "cli.die", "--die"])
        _ = try dying.readLine()
        let died = try portname(address + ["send", "cli.die", "x"])
        #expect(died.status == .exited(4))
        #expect(try dying.wait() == .exited(9))

        let nobody = try portname(["--address", directory.path + "/none.sock", "list"])
        #expect(nobody.status == .exited(5))
        #expect(nobody.error.contains(directory.path + "/none.sock") && nobody.error.contains("portnamed"), "\(nobody.error)")
    }

    @Test(arguments: [
        [],
        ["frobnicate"],
        ["lookup"],
        ["lookup", "a", "b"],
        ["lookup", "a", "--wait", "soon"],
        ["send"],
        ["send", "a", "--id", "minus-one"],
        ["serve"],
        ["list", "extra"],
        ["--address"],
        ["lookup", "a/b"],
    ])
    func usageErrorsExitTwo(arguments: [String]) throws {
        let directory = TestDirectory()
        // No server there: a usage error (an invalid name included) is found before any
        // connection is tried, so the status is 2, not 5.
        let result = try portname(arguments == ["--address"] ? arguments : ["--address", directory.address] + arguments)
        #expect(result.status == .exited(2), "\(arguments): \(result.error)")
    }
}
