import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// Services started on demand, with real processes: the test helper is the service, named
/// by a service file's `Exec=`; each start appends a line to a log the test reads.
@Suite("Names: services started on demand")
struct ActivationTests {
    /// A server whose one service directory is the test's, and a client of it.
    final class Setup: Sendable {
        let directory = TestDirectory()
        let server: NameServer
        let names: NameServerClient
        var services: String { directory.path + "/services" }
        var log: String { directory.path + "/starts.log" }

        init() throws {
            mkdir(directory.path + "/services", 0o700)
            var policy = NameServerPolicy()
            policy.serviceDirectories = [directory.path + "/services"]
            server = try NameServer.start(at: directory.address, policy: policy)
            names = try NameServerClient.blockingConnect(to: directory.address)
        }

        deinit {
            names.close()
            server.stop()
        }

        /// Writes `NAME.service` with `Name=NAME` and `lines`.
        func service(_ name: String, _ lines: String) throws {
            try "[PortKit Service]\nName=\(name)\n\(lines)\n".write(toFile: "\(services)/\(name).service", atomically: true, encoding: .utf8)
        }

        /// `Exec=` the test helper's `names-activated` scenario with `arguments`.
        func helperService(_ name: String, _ arguments: String, timeout: String? = nil) throws {
            var lines = "Exec=\(ChildProcess.helperPath) names-activated \(log) \(arguments)"
            if let timeout { lines += "\nTimeoutSec=\(timeout)" }
            try service(name, lines)
        }

        /// The pids the log says were started, in order.
        var starts: [Int32] {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int32($0.dropFirst("start ".count)) }
        }

        func held(_ name: String) throws -> Bool { try names.blockingList().contains { $0.name == name } }
    }

    @Test func aLookupStartsTheServiceWhichExitsWhenIdleAndTheNextLookupStartsItAgain() throws {
        let setup = try Setup()
        try setup.helperService("svc.echo", "--idle 0.2")

        let first = try setup.names.blockingLookup("svc.echo")
        let firstPID = try #require(setup.starts.first)
        #expect(try ask(first, "hi") == "\(firstPID) hi")
        #expect(setup.starts == [firstPID])
        #expect(try setup.names.blockingStatus(of: "svc.echo").isActivatable == true)
        // Closing the only client's connection makes the service idle: it exits, and its
        // name goes with its connection.
        first.invalidate()
        #expect(try waitFor { try !setup.held("svc.echo") })
        #expect(waitFor { kill(firstPID, 0) == -1 && errno == ESRCH })  // reaped by the server

        let second = try setup.names.blockingLookup("svc.echo")
        let starts = setup.starts
        #expect(starts.count == 2 && starts[1] != firstPID)
        #expect(try ask(second, "again") == "\(starts[1]) again")
        second.invalidate()
    }

    @Test func aServiceHeldByAClientIsNotIdle() throws {
        let setup = try Setup()
        try setup.helperService("svc.held", "--idle 0.1")
        let port = try setup.names.blockingLookup("svc.held")
        let pid = try #require(setup.starts.first)
        // Well past the idle interval, the client still holds its connection: still served.
        let gone = try waitFor(.milliseconds(400)) { try !setup.held("svc.held") }
        #expect(!gone)
        #expect(try ask(port, "still") == "\(pid) still")
        port.invalidate()
        #expect(try waitFor { try !setup.held("svc.held") })
    }

    @Test(arguments: [
        ("svc.exits", "--exit 3", NameActivationFailure.exited(status: 3)),
        ("svc.hangs", "--hang", NameActivationFailure.timedOut(after: .milliseconds(500))),
    ])
    func aStartThatFailsAnswersWhy(name: String, arguments: String, failure: NameActivationFailure) throws {
        let setup = try Setup()
        try setup.helperService(name, arguments, timeout: "0.5")
        #expect(throws: NameServerError.activationFailed(name: name, reason: failure)) { try setup.names.blockingLookup(name) }
        let pid = try #require(setup.starts.first)
        // The hung one was sent SIGTERM; both are reaped through the server's loop.
        #expect(waitFor { kill(pid, 0) == -1 && errno == ESRCH })
        #expect(setup.starts.count == 1)
    }

    @Test func aServiceKilledBeforeRegisteringAnswersTheSignal() throws {
        let setup = try Setup()
        try setup.service("svc.killed", "Exec=/bin/sh -c 'kill -9 $$'")
        #expect(throws: NameServerError.activationFailed(name: "svc.killed", reason: .signalled(signal: SIGKILL))) {
            try setup.names.blockingLookup("svc.killed")
        }
    }

    @Test func concurrentLookupsShareOneStart() async throws {
        let setup = try Setup()
        try setup.helperService("svc.shared", "--idle 0.2")
        let clients = try (0..<4).map { _ in try NameServerClient.blockingConnect(to: setup.directory.address) }
        defer { for client in clients { client.close() } }
        let replies = try await withThrowingTaskGroup(of: String.self) { group in
            for (index, client) in clients.enumerated() {
                group.addTask {
                    let port = try await client.lookup("svc.shared")
                    defer { port.invalidate() }
                    return try await port.request(Message(id: 1, text: "\(index)"), receiveTimeout: .seconds(30)).text
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let pid = try #require(setup.starts.first)
        #expect(setup.starts == [pid])
        #expect(Set(replies) == Set((0..<4).map { "\(pid) \($0)" }))
        #expect(waitFor { kill(pid, 0) == -1 && errno == ESRCH })  // idle once the lookers closed
    }

    @Test func activatableNamesAreListedAndOthersAreStillNotFound() throws {
        let setup = try Setup()
        try setup.helperService("svc.b", "")
        try setup.helperService("svc.a", "")
        try "not a service file".write(toFile: setup.services + "/README", atomically: true, encoding: .utf8)
        #expect(try setup.names.blockingActivatableNames() == ["svc.a", "svc.b"])
        #expect(throws: NameServerError.notFound(name: "svc.c")) { try setup.names.blockingLookup("svc.c") }
        #expect(setup.starts.isEmpty)
    }

    @Test func aBrokenServiceFileAnswersCouldNotStart() throws {
        let setup = try Setup()
        try setup.service("svc.broken", "Exec=relative/path")
        let path = setup.services + "/svc.broken.service"
        let failure = NameActivationFailure.couldNotStart(reason: "\(path):3: the program must be an absolute path")
        #expect(throws: NameServerError.activationFailed(name: "svc.broken", reason: failure)) {
            try setup.names.blockingLookup("svc.broken")
        }
    }
}

@Suite("Names: service files")
struct ActivationFileTests {
    @Test(arguments: [
        ("/bin/a b  c", ["/bin/a", "b", "c"]),
        (#"/bin/a "b c" 'd "e"' f\ g"#, ["/bin/a", "b c", #"d "e""#, "f g"]),
        (#"/bin/a "x\"y" ''"#, ["/bin/a", #"x"y"#, ""]),
    ])
    func execLinesSplitIntoWords(line: String, words: [String]) throws {
        #expect(try ExecLine.split(line).get() == words)
    }

    @Test(arguments: [("/bin/a 'b", ExecLine.Problem.unterminatedQuote), ("/bin/a b\\", .trailingBackslash), ("  ", .empty)])
    func badExecLinesAreRefused(line: String, problem: ExecLine.Problem) {
        #expect(throws: problem) { try ExecLine.split(line).get() }
    }

    @Test func aFileParses() throws {
        let file = try ActivationFile.parse("# comment\n[PortKit Service]\nName = x.y\nSystemdUnit=x.service\nTimeoutSec=2.5\n", path: "f").get()
        #expect(file.name == "x.y" && file.launch == .systemdUnit("x.service") && file.timeout == .milliseconds(2500))
    }

    @Test(arguments: [
        ("Name=x\n", "f:1: neither Exec= nor SystemdUnit="),
        ("Name=x\nExec=/a\nSystemdUnit=u\n", "f:3: both Exec= and SystemdUnit="),
        ("Name=x\nExec=/a\nTimeoutSec=soon\n", "f:3: not a positive number of seconds"),
        ("Name=x\nExek=/a\n", "f:2: unknown key 'Exek'"),
        ("Exec=/a\n", "f: no Name="),
    ])
    func badFilesSayWhichLine(text: String, problem: String) {
        #expect(throws: ActivationFileError.self) { try ActivationFile.parse(text, path: "f").get() }
        if case .failure(let error) = ActivationFile.parse(text, path: "f") { #expect(error.description == problem) }
    }
}
