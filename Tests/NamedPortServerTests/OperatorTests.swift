import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitSystem

/// `portnamed` as an operator runs it (socket activation, readiness, signals, policy and
/// logging flags) and `portname` as a script reads it (`status`, `--json`, `--help`).
@Suite("portnamed and portname for operators and scripts", .serialized)
struct OperatorTests {
    static let socketActivate = "/usr/bin/systemd-socket-activate"

    /// Runs `executable arguments…` to the end: (exit status, stdout lines, stderr).
    private func run(
        _ executable: String, _ arguments: [String], environment: [String: String?] = [:]
    ) throws -> (status: SpawnedProcess.Termination, lines: [String], error: String) {
        let child = try SpawnedProcess.spawn(executable, arguments, environment: environment)
        let lines = try child.remainingLines(within: .seconds(60))
        let status = try child.wait(within: .seconds(60))
        return (status, lines, child.standardError())
    }

    private func portname(_ arguments: [String]) throws -> (status: SpawnedProcess.Termination, lines: [String], error: String) {
        try run(ChildProcessPaths.portname, arguments)
    }

    private func startDaemon(_ address: String, _ options: [String] = []) throws -> SpawnedProcess {
        let daemon = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", address] + options)
        #expect(try daemon.readLine() == "listening on \(address)")
        return daemon
    }

    /// One JSON object from a `--json` line.
    private func object(_ line: String) throws -> [String: Any] {
        let parsed = try JSONSerialization.jsonObject(with: Data(line.utf8))
        return try #require(parsed as? [String: Any], "not a JSON object: \(line)")
    }

    // MARK: systemd

    @Test(arguments: [false, true])
    func underSocketActivationItNotifiesReadinessSurvivesSIGHUPAndStopsOnSIGTERM(abstract: Bool) throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.socketActivate),
            "\(Self.socketActivate) is missing: install Debian's systemd package (apt-get install -y systemd)")
        let directory = TestDirectory()
        let notify = try NotifyListener(
            path: abstract ? "portkit-test-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" : directory.path + "/notify",
            abstract: abstract)
        // What systemd does with a .socket unit and a Type=notify service, by hand.
        // systemd-socket-activate passes on only the environment it is told to: a
        // sanitizer's options too, when the tests run under one.
        let passed = ["NOTIFY_SOCKET", "ASAN_OPTIONS", "TSAN_OPTIONS"].filter {
            $0 == "NOTIFY_SOCKET" || ProcessInfo.processInfo.environment[$0] != nil
        }
        let daemon = try SpawnedProcess.spawn(
            Self.socketActivate,
            ["-l", directory.address] + passed.flatMap { ["-E", $0] } + [ChildProcessPaths.portnamed, "--log-level", "debug"],
            environment: ["NOTIFY_SOCKET": notify.address, "PORTKIT_NAME_SERVER": "/nonexistent/elsewhere.sock"])
        defer { daemon.kill() }
        // systemd-socket-activate binds, then listens (a connect in between is refused),
        // and starts the service at the first connection it accepts.
        var connected: NameServerClient?
        #expect(waitFor(.seconds(60)) {
            connected = try? NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(60))
            return connected != nil
        })
        let client = try #require(connected, "systemd-socket-activate never listened at \(directory.address)")
        #expect(try daemon.readLine() == "listening on \(directory.address)")
        // It execs the service: the pid the client sees is the one started.
        #expect(client.serverPID == daemon.pid)

        let ready = try notify.next()
        #expect(ready["READY"] == "1")
        #expect(ready["MAINPID"] == "\(daemon.pid)")
        #expect(ready["STATUS"] == "listening on \(directory.address)")

        daemon.signal(SIGHUP)
        #expect(waitFor { daemon.standardError().contains("SIGHUP received") })
        #expect(try client.status().pid == daemon.pid)
        client.close()

        daemon.signal(SIGTERM)
        #expect(try notify.next()["STOPPING"] == "1")
        #expect(try daemon.wait(within: .seconds(60)) == .exited(0))
        #expect(daemon.standardError().contains("SIGTERM received: stopping"))
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func aStopSignalRemovesTheSocketAndLockFileAndSIGHUPDoesNot(signal: Int32) throws {
        let directory = TestDirectory()
        let daemon = try startDaemon(directory.address)
        defer { daemon.kill() }
        daemon.signal(SIGHUP)
        #expect(waitFor { daemon.standardError().contains("SIGHUP received") })
        #expect(try portname(["--address", directory.address, "status"]).status == .exited(0))
        #expect(FileManager.default.fileExists(atPath: directory.address + ".lock"))

        daemon.signal(signal)
        #expect(try daemon.wait(within: .seconds(60)) == .exited(0))
        #expect(!FileManager.default.fileExists(atPath: directory.address))
        #expect(!FileManager.default.fileExists(atPath: directory.address + ".lock"))
    }

    // MARK: Policy and logging flags

    @Test func flagsSetTheSocketModeAndLimitsAndRefusalsAreLoggedAndCounted() throws {
        let directory = TestDirectory()
        let daemon = try startDaemon(directory.address, ["--socket-mode", "0660", "--max-names", "1", "--log-level", "info"])
        defer { daemon.kill() }
        #expect(try FileSystem.status(directory.address).permissions == 0o660)

        let loop = PortLoop()
        let client = try NameServerClient.blockingConnect(to: directory.address)
        try client.blockingRegister("op.one", port: try loop.port())
        #expect(throws: NameServerError.limitExceeded(what: "names per connection", limit: 1)) {
            try client.blockingRegister("op.two", port: try loop.port())
        }
        #expect(waitFor { daemon.standardError().contains("name registered: op.one pid \(getpid())") })
        #expect(waitFor {
            daemon.standardError().contains("request refused: pid \(getpid()) uid \(getuid()): limit reached: at most 1 names")
        })

        let status = try client.status()
        #expect(status.pid == daemon.pid)
        #expect(status.names == 1 && status.connections == 1 && status.refusedRequests == 1)
        #expect(status.watches == 0 && status.waitingLookups == 0 && status.refusedConnections == 0)
        client.close()
        #expect(waitFor { daemon.standardError().contains("name released: op.one") })
    }

    @Test func aClientOverTheConnectionLimitIsRefusedLoggedAndCounted() throws {
        let directory = TestDirectory()
        let daemon = try startDaemon(directory.address, ["--max-connections", "1"])
        defer { daemon.kill() }
        let first = try NameServerClient.blockingConnect(to: directory.address)
        #expect(throws: NameServerError.self) { try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(30)).blockingList() }
        let line = "warning: client refused: pid \(getpid()) uid \(getuid()): limit reached: at most 1 connections"
        #expect(waitFor { daemon.standardError().contains(line) })
        let status = try first.status()
        #expect(status.refusedConnections == 1 && status.connections == 1)
    }

    @Test func underTheJournalEachLineStartsWithItsPriority() throws {
        let directory = TestDirectory()
        let daemon = try SpawnedProcess.spawn(
            ChildProcessPaths.portnamed, ["--address", directory.address, "--log-level", "debug"],
            environment: ["JOURNAL_STREAM": "8:12345"])
        defer { daemon.kill() }
        #expect(try daemon.readLine() == "listening on \(directory.address)")
        let client = try NameServerClient.blockingConnect(to: directory.address)
        #expect(try client.blockingList().isEmpty)  // served: the server took the connection
        client.close()
        #expect(waitFor { daemon.standardError().contains("<7>connection closed: pid \(getpid())") })
        #expect(daemon.standardError().hasPrefix("<5>listening on \(directory.address)"))
    }

    @Test(arguments: [
        ["--socket-mode", "999"], ["--socket-mode"], ["--log-level", "loud"], ["--max-names", "0"],
        ["--allow-uid", "someone"], ["--allow-uid", "1", "--allow-any-user"], ["--frobnicate"],
    ])
    func portnamedUsageErrorsExitTwo(arguments: [String]) throws {
        let result = try run(ChildProcessPaths.portnamed, arguments)
        #expect(result.status == .exited(2), "\(arguments): \(result.error)")
        // The mistake and a pointer to the help, not the whole help.
        #expect(result.error.contains("(see 'portnamed --help')") && result.error.split(separator: "\n").count <= 3, "\(result.error)")
    }

    // MARK: portname for scripts

    @Test func jsonOutputParsesAndMatchesTheTextLines() throws {
        let directory = TestDirectory()
        let daemon = try startDaemon(directory.address)
        defer { daemon.kill() }
        let address = ["--address", directory.address]
        let uid = Int(getuid())

        let watcher = try SpawnedProcess.spawn(ChildProcessPaths.portname, address + ["watch", "js.", "--json"])
        defer { watcher.kill() }
        let textWatcher = try SpawnedProcess.spawn(ChildProcessPaths.portname, address + ["watch", "js."])
        defer { textWatcher.kill() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        #expect(try waitFor { try client.status().watches == 2 })

        let owner = try startOwner(directory.address, "js.one")
        defer { owner.kill() }
        let appeared = try object(try watcher.readLine())
        #expect(appeared["event"] as? String == "appeared" && appeared["name"] as? String == "js.one")
        #expect(appeared["pid"] as? Int == Int(owner.pid) && appeared["uid"] as? Int == uid)
        #expect(appeared["initial"] as? Bool == false)
        #expect(try textWatcher.readLine() == "+ js.one \(owner.pid) \(uid)")

        let listed = try portname(address + ["list", "--json"])
        #expect(listed.status == .exited(0) && listed.lines.count == 1)
        let entry = try object(try #require(listed.lines.first))
        #expect(entry["name"] as? String == "js.one" && entry["pid"] as? Int == Int(owner.pid) && entry["uid"] as? Int == uid)
        // The text line has the same fields in the same order as the watch line after its sign.
        let text = try portname(address + ["list"])
        #expect(text.lines == ["js.one\t\(owner.pid)\t\(uid)"])

        let looked = try portname(address + ["lookup", "js.one", "--json"])
        #expect(looked.status == .exited(0))
        let found = try object(try #require(looked.lines.first))
        #expect(found["name"] as? String == "js.one" && found["pid"] as? Int == Int(owner.pid) && found["uid"] as? Int == uid)

        let status = try portname(address + ["status", "--json"])
        #expect(status.status == .exited(0) && status.lines.count == 1)
        let state = try object(try #require(status.lines.first))
        #expect(state["address"] as? String == directory.address)
        #expect(state["pid"] as? Int == Int(daemon.pid))
        #expect(state["names"] as? Int == 1 && state["watches"] as? Int == 2)
        #expect((state["uptime"] as? Double ?? -1) >= 0)
        for key in ["connections", "waiting_lookups", "refused_connections", "refused_requests"] {
            #expect(state[key] is Int, "\(key) in \(state)")
        }
        let statusText = try portname(address + ["status"])
        #expect(statusText.status == .exited(0) && statusText.lines.contains("pid: \(daemon.pid)"))
        #expect(statusText.lines.contains("names: 1"))

        owner.signal(SIGKILL)
        let vanished = try object(try watcher.readLine())
        #expect(vanished["event"] as? String == "vanished" && vanished["pid"] as? Int == Int(owner.pid))
        #expect(try textWatcher.readLine() == "- js.one \(owner.pid) \(uid)")

        // A watch begun while a name is held marks it as the initial state.
        let second = try startOwner(directory.address, "js.two")
        defer { second.kill() }
        let late = try SpawnedProcess.spawn(ChildProcessPaths.portname, address + ["watch", "--json"])
        defer { late.kill() }
        let initial = try object(try late.readLine())
        #expect(initial["name"] as? String == "js.two" && initial["initial"] as? Bool == true)
    }

    @Test(arguments: [[String]]([
        ["--help"], ["-h"], ["help"], ["help", "watch"],
        ["list", "--help"], ["lookup", "--help"], ["watch", "--help"], ["status", "--help"],
        ["serve", "--help"], ["send", "--help"], ["lookup", "-h"],
    ]))
    func everyVerbsHelpExitsZeroWithTheExitCodesAndAddressRules(arguments: [String]) throws {
        // No server anywhere: help needs none.
        let result = try portname(["--address", "/nonexistent/names.sock"] + arguments)
        #expect(result.status == .exited(0), "\(arguments): \(result.error)")
        let text = result.lines.joined(separator: "\n")
        #expect(text.contains("usage: portname"))
        #expect(text.contains("PORTKIT_NAME_SERVER") && text.contains("/tmp/portkit-UID/names.sock"))
        #expect(text.contains("5 no name server answers"))
        #expect(!text.contains("NameServer"), "help for a shell user names no Swift type")
    }

    @Test func bothCommandsPrintTheirVersionAndPortnamedItsHelp() throws {
        let version = NamedPortServerModule.version
        #expect(try portname(["--version"]).lines == ["portname \(version)"])
        #expect(try run(ChildProcessPaths.portnamed, ["--version"]).lines == ["portnamed \(version)"])
        let help = try run(ChildProcessPaths.portnamed, ["--help"])
        #expect(help.status == .exited(0))
        #expect(help.lines.joined(separator: "\n").contains("SIGHUP"))
    }

    @Test(arguments: ["two words", "tab\there", "no\u{A0}break"])
    func namesWithWhitespaceAreRefusedAlikeByTheLibraryAndTheCommand(name: String) throws {
        #expect(throws: NameServerError.self) { try NameRules.validate(name) }
        let directory = TestDirectory()
        for verb in [["lookup", name], ["serve", name], ["send", name, "x"]] {
            let result = try portname(["--address", directory.address] + verb)
            #expect(result.status == .exited(2), "\(verb): \(result.error)")
            #expect(result.error.contains("invalid name"), "\(result.error)")
        }
        #expect(try portname(["--address", directory.address, "watch", name]).status == .exited(2))
    }
}
