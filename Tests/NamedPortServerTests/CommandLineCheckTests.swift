import Foundation
import Glibc
import NamedPortServer
import PermanentThread
import PortKitTestSupport
import Testing
import PortKitSystem

/// What `portname` and `portnamed` refuse before doing anything, and the answers they
/// give when something is wrong: times too large to mean anything, names that are not
/// UTF-8, an empty address, a file at the address, a server that dies before answering.
@Suite("portnamed and portname: refusals and wrong-answer cases")
struct CommandLineCheckTests {
    /// Runs a product to the end: (how it ended, stdout, stderr).
    private func run(
        _ product: String, _ arguments: [String], viaShell: String? = nil
    ) throws -> (status: SpawnedProcess.Termination, output: String, error: String) {
        let child = try SpawnedProcess.spawn(SpawnedProcess.product(product), arguments, viaShell: viaShell)
        let output = try child.remainingOutput(within: .seconds(60))
        let status = try child.wait(within: .seconds(60))
        return (status, output, child.standardError())
    }

    /// Every time option of `portname`, with a value that is not a number of seconds
    /// from 0 to one day: a usage error (exit 2, no crash), before any server is asked.
    @Test(arguments: [
        ["send", "x", "--timeout", "1e16", "hi"], ["send", "x", "--timeout", "1e300"], ["send", "x", "--timeout", "86401"],
        ["send", "x", "--timeout", "-1"], ["send", "x", "--timeout", "nan"], ["send", "x", "--timeout", "inf"],
        ["send", "x", "--timeout", "ten"], ["send", "x", "--id", "1e3"], ["send", "x", "--id", "4294967296"],
        ["lookup", "x", "--wait", "1e300"], ["lookup", "x", "--wait", "1e16"], ["lookup", "x", "--wait", "86400.5"],
        ["lookup", "x", "--wait", "-0.5"], ["lookup", "x", "--wait", "NaN"], ["lookup", "x", "--wait", "-inf"],
    ])
    func aTimeOrNumberOutOfRangeIsAUsageError(arguments: [String]) throws {
        let directory = TestDirectory()
        let result = try run("portname", ["--address", directory.address] + arguments)
        #expect(result.status == .exited(2), "\(arguments): \(result.status) \(result.error)")
        #expect(result.error.contains("portname \(arguments[0]) --help"), "\(result.error)")
    }

    /// The largest time is taken (and a wait is the server's cap, one day): the command
    /// gets as far as the server, absent here.
    @Test(arguments: [["send", "x", "--timeout", "86400"], ["lookup", "x", "--wait", "86400"]])
    func theLargestTimeIsTaken(arguments: [String]) throws {
        let directory = TestDirectory()
        let result = try run("portname", ["--address", directory.address] + arguments)
        #expect(result.status == .exited(5), "\(arguments): \(result.status) \(result.error)")
    }

    /// A name that is not UTF-8 is refused (exit 2), not rewritten with U+FFFD: `caf\xe9`
    /// and `caf\xe8` are not made one name.
    @Test(arguments: ["serve", "lookup", "send"])
    func aNameThatIsNotUTF8IsRefused(verb: String) throws {
        let directory = TestDirectory()
        let daemon = try SpawnedProcess.spawn(SpawnedProcess.product("portnamed"), ["--address", directory.address])
        defer { daemon.kill() }
        #expect(try daemon.readLine() == "listening on \(directory.address)")
        // The shell makes the byte: the test's own arguments are Swift strings.
        let result = try run(
            "portname", ["--address", directory.address, verb], viaShell: #"set -- "$@" "$(printf 'caf\351')"; exec"#)
        #expect(result.status == .exited(2), "\(result.status) \(result.error)")
        #expect(result.error.contains("not UTF-8"), "\(result.error)")
        #expect(try NameServerClient.blockingConnect(to: directory.address).blockingList().isEmpty)
    }

    /// An empty `--address` is a usage error for both commands (only an empty
    /// `PORTKIT_NAME_SERVER` means the default address).
    @Test func anEmptyAddressIsAUsageError() throws {
        let daemon = try run("portnamed", ["--address", ""])
        #expect(daemon.status == .exited(2))
        #expect(daemon.error.contains("--address needs a path"))
        let client = try run("portname", ["--address", "", "list"])
        #expect(client.status == .exited(2))
        #expect(client.error.contains("--address needs a path"))
    }

    /// A regular file, a directory, a fifo or a symbolic link at the address: `portnamed`
    /// exits 1 saying it is not a socket (not that a server runs there), and leaves it.
    @Test(arguments: ["file", "directory", "fifo", "symlink"])
    func aFileThatIsNotASocketIsNamedSoAndLeftAlone(kind: String) throws {
        let directory = TestDirectory()
        let path = directory.address
        switch kind {
        case "file": #expect(FileManager.default.createFile(atPath: path, contents: Data("keep".utf8)))
        case "directory": try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        case "fifo": #expect(mkfifo(path, 0o600) == 0)
        default: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: directory.path + "/elsewhere")
        }
        let before = try FileSystem.status(path)
        let result = try run("portnamed", ["--address", path])
        #expect(result.status == .exited(1))
        #expect(result.error.contains("not a socket"), "\(result.error)")
        #expect(!result.error.contains("already running"), "\(result.error)")
        let after = try FileSystem.status(path)
        #expect(after.isSameFile(as: before) && after.mode == before.mode)
    }

    /// A server that dies before answering (a real process, its listener gone with it,
    /// killed once the client's hello is in) is a server that went away: exit 5, not "busy".
    @Test func aServerKilledBeforeAnsweringIsGoneNotBusy() throws {
        let directory = TestDirectory()
        let server = try SpawnedProcess.helper("unix-hello", [directory.address])
        defer { server.kill() }
        #expect(try server.readLine() == "listening")
        let client = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", directory.address, "list"])
        defer { client.kill() }
        #expect(try server.readLine(within: .seconds(60)) == "hello")
        server.signal(SIGKILL)
        #expect(try server.wait() == .signalled(SIGKILL))
        let output = try client.remainingOutput(within: .seconds(60))
        #expect(try client.wait(within: .seconds(60)) == .exited(5), "\(client.standardError())")
        #expect(output.isEmpty)
        #expect(!client.standardError().contains("busy"), "\(client.standardError())")
    }

    /// A server whose listener stays and that hangs up before answering could not take the
    /// connection: busy (exit 1).
    @Test func aServerThatHangsUpBeforeAnsweringIsBusy() throws {
        let directory = TestDirectory()
        // The server, as far as the client can tell: a listening socket of this process.
        let listener = try UnixSocket.make(nonBlocking: false)
        defer { try? listener.close() }
        try UnixSocket.bind(listener, to: directory.address)
        try UnixSocket.listen(listener, backlog: 16)
        let client = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", directory.address, "list"])
        defer { client.kill() }
        #expect(try listener.poll(CShort(POLLIN), timeout: .seconds(60)) != 0)
        let accepted = try #require(try UnixSocket.accept(listener))
        #expect(try accepted.poll(CShort(POLLIN), timeout: .seconds(60)) != 0)
        try accepted.close()
        let output = try client.remainingOutput(within: .seconds(60))
        #expect(try client.wait(within: .seconds(60)) == .exited(1), "\(client.standardError())")
        #expect(output.isEmpty)
        #expect(client.standardError().contains("busy"), "\(client.standardError())")
    }
}
