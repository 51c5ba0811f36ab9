import Foundation
import Glibc
import NamedPortServer
import PortKitTestSupport
import Testing

/// `portname call`, `status NAME` and `monitor` against real served names: binary
/// payloads, descriptors, one-way sends, JSON lines.
@Suite("portname call, status and monitor", .serialized)
struct CommandLineCallTests {
    /// Runs `portname --address ADDRESS arguments…` to the end: (exit status, stdout lines, stderr).
    private func portname(
        _ address: String, _ arguments: [String]
    ) throws -> (status: SpawnedProcess.Termination, lines: [String], error: String) {
        let child = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", address] + arguments)
        let lines = try child.remainingLines(within: .seconds(60))
        let status = try child.wait(within: .seconds(60))
        return (status, lines, child.standardError())
    }

    private func object(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    /// The `names-echo` owner of `name`, serving.
    private func echo(_ address: String, _ name: String) throws -> SpawnedProcess {
        let owner = try SpawnedProcess.helper("names-echo", [address, name])
        #expect(try owner.readLine() == "serving \(name) \(owner.pid)")
        return owner
    }

    @Test func callSendsABinaryFileAndADescriptorAndPrintsTheReplyAsJSON() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try echo(directory.address, "cli.echo")
        defer { owner.kill() }
        // Every byte value, zeros and invalid UTF-8 included.
        let payload = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let payloadPath = directory.path + "/payload.bin", descriptorPath = directory.path + "/shared.txt"
        try payload.write(to: URL(fileURLWithPath: payloadPath))
        try Data("descriptor data".utf8).write(to: URL(fileURLWithPath: descriptorPath))

        let result = try portname(
            directory.address, ["call", "cli.echo", "--id", "9", "--bytes", payloadPath, "--fd", descriptorPath, "--json"])
        #expect(result.status == .exited(0), "\(result.error)")
        let line = try #require(result.lines.first.flatMap(object), "\(result.lines)")
        // The echo answers the bytes, then what it read through the descriptor, and sends
        // the descriptor back.
        let expected = payload + Data("descriptor data".utf8)
        #expect(line["name"] as? String == "cli.echo")
        #expect(line["id"] as? Int == 9)
        #expect(line["size"] as? Int == expected.count)
        #expect(line["bytes"] as? String == expected.base64EncodedString())
        #expect(line["components"] as? Int == 2 && line["descriptors"] as? Int == 1)
    }

    @Test func callSendsOneWayAndSendStaysItsTextForm() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try echo(directory.address, "cli.oneway")
        defer { owner.kill() }
        let sent = try portname(directory.address, ["call", "cli.oneway", "--id", "3", "--text", "hello", "--oneway", "--json"])
        #expect(sent.status == .exited(0), "\(sent.error)")
        #expect(sent.lines == [#"{"name": "cli.oneway", "id": 3, "sent": 5}"#])
        #expect(try owner.readLine() == "message 3 5")
        #expect(try portname(directory.address, ["send", "cli.oneway", "ping"]).lines == ["ping"])
        let both = try portname(directory.address, ["call", "cli.oneway", "--text", "a", "--bytes", "-"])
        #expect(both.status == .exited(2))
    }

    @Test func statusOfANamePrintsItsOwnersCredentialsAndProcess() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try echo(directory.address, "cli.status")
        defer { owner.kill() }
        let result = try portname(directory.address, ["status", "cli.status", "--json"])
        #expect(result.status == .exited(0), "\(result.error)")
        let line = try #require(result.lines.first.flatMap(object), "\(result.lines)")
        #expect(line["pid"] as? Int == Int(owner.pid))
        #expect(line["uid"] as? Int == Int(getuid()) && line["gid"] as? Int == Int(getgid()))
        let helper = URL(fileURLWithPath: ChildProcessPaths.helper).resolvingSymlinksInPath().path
        #expect(line["executable"] as? String == helper)
        #expect((line["cgroup"] as? String)?.hasPrefix("/") == true)
        let text = try portname(directory.address, ["status", "cli.status"])
        #expect(text.lines.prefix(4) == ["name: cli.status", "pid: \(owner.pid)", "uid: \(getuid())", "gid: \(getgid())"])
        #expect(try portname(directory.address, ["status", "cli.none"]).status == .exited(1))
    }

    @Test func monitorPrintsARequestAndItsReplyWithTheirSenders() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try echo(directory.address, "cli.watched")
        defer { owner.kill() }
        #expect(try portname(directory.address, ["monitor", "cli/bad*"]).status == .exited(2))
        #expect(try portname(directory.address, ["monitor"]).status == .exited(2))
        let monitor = try SpawnedProcess.spawn(
            ChildProcessPaths.portname, ["--address", directory.address, "monitor", "cli.*", "--json"])
        defer { monitor.kill() }
        #expect(try object(monitor.readLine())?["event"] as? String == "monitoring")

        let caller = try SpawnedProcess.spawn(
            ChildProcessPaths.portname, ["--address", directory.address, "send", "cli.watched", "--id", "4", "hi"])
        #expect(try caller.remainingLines() == ["hi"])
        #expect(try caller.wait() == .exited(0))

        let lines = try (0..<4).map { _ in try #require(object(try monitor.readLine())) }
        #expect(lines.map { $0["event"] as? String } == ["opened", "request", "reply", "closed"])
        #expect(lines[0]["pid"] as? Int == Int(caller.pid))
        #expect(lines[1]["pid"] as? Int == Int(caller.pid) && lines[1]["direction"] as? String == "to")
        #expect(lines[1]["id"] as? Int == 4 && lines[1]["correlation"] as? Int == 1 && lines[1]["size"] as? Int == 2)
        #expect(lines[2]["pid"] as? Int == Int(owner.pid) && lines[2]["direction"] as? String == "from")
        #expect(lines[2]["correlation"] as? Int == 1 && lines[2]["components"] as? String == "bytes:2")
    }
}
