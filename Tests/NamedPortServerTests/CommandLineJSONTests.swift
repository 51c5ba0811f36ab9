import Foundation
import Glibc
import NamedPortServer
import PortKitTestSupport
import Testing

/// What scripts read: every `--json` line parses as one JSON object with the documented
/// keys (JSON Lines), `portname help VERB`, and `portnamed`'s short usage error.
@Suite("portname --json and usage, as scripts see them", .serialized)
struct CommandLineJSONTests {
    /// Runs `portname arguments…` to the end: (exit status, stdout lines, stderr).
    private func portname(_ arguments: [String]) throws -> (status: SpawnedProcess.Termination, lines: [String], error: String) {
        let child = try SpawnedProcess.spawn(ChildProcessPaths.portname, arguments)
        let lines = try child.remainingLines(within: .seconds(60))
        let status = try child.wait(within: .seconds(60))
        return (status, lines, child.standardError())
    }

    /// The line as a JSON object (nil if it is not one).
    private func object(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    /// The keys of a JSON object line, in the order the line has them.
    private func keys(_ line: String) -> [String] {
        guard let object = object(line) else { return [] }
        return object.keys.sorted { line.range(of: "\"\($0)\":")!.lowerBound < line.range(of: "\"\($1)\":")!.lowerBound }
    }

    @Test func sendAndServePrintJSONLines() throws {
        let directory = TestDirectory()
        let daemon = try startServer(directory)
        defer { daemon.kill() }
        let address = ["--address", directory.address]

        let server = try SpawnedProcess.spawn(ChildProcessPaths.portname, address + ["serve", "json.echo", "--echo", "--json"])
        defer { server.kill() }
        let serving = try server.readLine()
        #expect(keys(serving) == ["event", "name", "pid"], "\(serving)")
        let started = try #require(object(serving), "\(serving)")
        #expect(started["event"] as? String == "serving")
        #expect(started["name"] as? String == "json.echo")
        #expect(started["pid"] as? Int == Int(server.pid))

        // A reply with quotes, a backslash and a tab still makes one valid JSON line.
        let text = "say \"hi\"\\\tthere"
        let sent = try portname(address + ["send", "json.echo", "--json", "--id", "7", text])
        #expect(sent.status == .exited(0), "\(sent.error)")
        try #require(sent.lines.count == 1, "\(sent.lines)")
        #expect(keys(sent.lines[0]) == ["name", "id", "reply"], "\(sent.lines[0])")
        let reply = try #require(object(sent.lines[0]), "\(sent.lines[0])")
        #expect(reply["name"] as? String == "json.echo")
        #expect(reply["id"] as? Int == 7)
        #expect(reply["reply"] as? String == text)

        // The other verbs' JSON lines parse too.
        let listed = try portname(address + ["list", "--json"])
        #expect(listed.status == .exited(0) && listed.lines.count == 1)
        #expect(keys(listed.lines.first ?? "") == ["name", "pid", "uid"], "\(listed.lines)")
        let looked = try portname(address + ["lookup", "json.echo", "--json"])
        #expect(object(looked.lines.first ?? "")?["pid"] as? Int == Int(server.pid), "\(looked.lines)")
        let status = try portname(address + ["status", "--json"])
        #expect(object(status.lines.first ?? "")?["names"] as? Int == 1, "\(status.lines)")
    }

    @Test func serveSaysInJSONWhenTheServerGoesAndWhenItServesAgain() throws {
        let directory = TestDirectory()
        let first = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", directory.address])
        #expect(try first.readLine() == "listening on \(directory.address)")
        let server = try SpawnedProcess.spawn(
            ChildProcessPaths.portname, ["--address", directory.address, "serve", "json.again", "--json"])
        defer { server.kill() }
        #expect(object(try server.readLine())?["event"] as? String == "serving")
        first.signal(SIGKILL)
        _ = try first.wait()
        let lost = try server.readLine(within: .seconds(60))
        #expect(keys(lost) == ["event", "name"] && object(lost)?["event"] as? String == "server_lost", "\(lost)")
        let second = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", directory.address])
        defer { second.kill() }
        #expect(try second.readLine() == "listening on \(directory.address)")
        let again = try server.readLine(within: .seconds(60))
        #expect(keys(again) == ["event", "name", "pid", "server_pid"], "\(again)")
        #expect(object(again)?["event"] as? String == "serving_again")
        #expect(object(again)?["server_pid"] as? Int == Int(second.pid), "\(again)")
    }

    @Test func helpVerbPrintsTheVerbsUsage() throws {
        for verb in ["list", "lookup", "watch", "status", "serve", "send"] {
            let viaHelp = try portname(["help", verb])
            let viaFlag = try portname([verb, "--help"])
            #expect(viaHelp.status == .exited(0) && viaHelp.lines == viaFlag.lines && !viaHelp.lines.isEmpty, "\(verb)")
        }
    }

    @Test(arguments: [
        ["--frobnicate"], ["--max-names", "many"], ["--etcd", "http://127.0.0.1:1"], ["--log-level"],
        ["--etcd", "ftp://nowhere", "--node", "a"],
    ])
    func portnamedsUsageErrorIsShortAndPointsAtHelp(arguments: [String]) throws {
        let directory = TestDirectory()
        let daemon = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", directory.address] + arguments)
        #expect(try daemon.wait(within: .seconds(60)) == .exited(2))
        let error = daemon.standardError()
        let lines = error.split(separator: "\n")
        #expect(!lines.isEmpty && lines.count <= 3, "\(arguments): \(error)")
        #expect(error.contains("portnamed --help"), "\(arguments): \(error)")
    }
}
