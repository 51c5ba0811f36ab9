import Foundation
import Glibc
import NamedPortServer
import PortKitTestSupport
import Testing

/// Activation through the commands: `portnamed --service-dir`, `portname list
/// --activatable`, and a service `portnamed` starts (its signals blocked for its signalfd)
/// that still takes the SIGTERM of a time-out.
@Suite("portnamed: services started on demand")
struct ActivationCommandLineTests {
    @Test func portnamedStartsListsAndStopsItsServices() throws {
        let directory = TestDirectory()
        let services = directory.path + "/services"
        let log = directory.path + "/starts.log"
        mkdir(services, 0o700)
        let helper = "\(ChildProcess.helperPath) names-activated \(log)"
        try "Name=cli.echo\nExec=\(helper) --idle 0.2\n".write(toFile: services + "/cli.echo.service", atomically: true, encoding: .utf8)
        try "Name=cli.hangs\nExec=\(helper) --hang\nTimeoutSec=0.3\n".write(toFile: services + "/cli.hangs.service", atomically: true, encoding: .utf8)
        let daemon = try SpawnedProcess.spawn(
            ChildProcessPaths.portnamed, ["--address", directory.address, "--service-dir", services])
        defer { daemon.kill() }
        #expect(try daemon.readLine() == "listening on \(directory.address)")

        let listed = try ChildProcess.run(executable: ChildProcessPaths.portname, ["--address", directory.address, "list", "--activatable"])
        #expect(listed.status == 0 && listed.output == "cli.echo\ncli.hangs\n")

        // `owner` (portname lookup) does not start a service; a lookup for a connection does.
        let owner = try ChildProcess.run(executable: ChildProcessPaths.portname, ["--address", directory.address, "lookup", "cli.echo"])
        #expect(owner.status == 1)
        let send = try ChildProcess.run(executable: ChildProcessPaths.portname, ["--address", directory.address, "send", "cli.echo", "hi"])
        let echoPID = try #require(Int32(send.output.split(separator: " ").first ?? ""))
        #expect(send.status == 0 && send.output == "\(echoPID) hi\n")
        // The looker has exited: the service is idle, exits, and portnamed reaps it.
        #expect(waitFor { kill(echoPID, 0) == -1 && errno == ESRCH })

        let hung = try ChildProcess.run(executable: ChildProcessPaths.portname, ["--address", directory.address, "send", "cli.hangs", "hi"])
        #expect(hung.status == 1)
        let starts = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
        let hungPID = try #require(starts.last.flatMap { Int32($0.dropFirst("start ".count)) })
        #expect(starts.count == 2 && hungPID != echoPID)
        #expect(waitFor { kill(hungPID, 0) == -1 && errno == ESRCH })
    }
}
