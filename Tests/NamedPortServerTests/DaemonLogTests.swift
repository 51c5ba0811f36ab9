import Foundation
import Glibc
import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitSystem

/// `portnamed`'s log never stops its server: a log reader that stalls (here, the test,
/// which does not read the daemon's standard error) costs lines, counted and said, never
/// service; and a client refused again and again fills no log.
@Suite("portnamed: a stalled log reader and repeated refusals")
struct DaemonLogTests {
    @Test func theServerAnswersWhileItsLogReaderIsStalled() throws {
        let directory = TestDirectory()
        let daemon = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", directory.address, "--log-level", "debug"])
        defer { daemon.kill() }
        #expect(try daemon.readLine() == "listening on \(directory.address)")

        // One process refused 600 times: logged a few times, not 600.
        let holder = try NameServerClient.blockingConnect(to: directory.address)
        defer { holder.close() }
        let port = ReceivePort()
        defer { port.invalidate() }
        let registration = try holder.blockingRegister("held", port: port)
        let squatter = try NameServerClient.blockingConnect(to: directory.address)
        defer { squatter.close() }
        for _ in 0..<600 {
            #expect(throws: NameServerError.self) { try squatter.blockingRegister("held", port: port) }
        }

        // Two debug lines per connection, far more than the pipe and the log's buffer
        // hold together, none of them read.
        for _ in 0..<4000 {
            let socket = try UnixSocket.make(nonBlocking: false)
            try UnixSocket.connect(socket, to: directory.address)
            try socket.close()
        }

        // The server still answers, at once, the library and the command alike.
        let asking = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(30))
        defer { asking.close() }
        let status = try asking.status()
        #expect(status.names == 1)
        let (exit, _) = try ChildProcess.run(executable: ChildProcessPaths.portname, ["--address", directory.address, "status"])
        #expect(exit == 0)

        // Once read again, the log says how many lines it dropped, on its next line.
        _ = daemon.standardError()
        #expect(try eventually(timeout: .seconds(60)) {
            let socket = try UnixSocket.make(nonBlocking: false)
            try UnixSocket.connect(socket, to: directory.address)
            try socket.close()
            return daemon.standardError().contains("log lines dropped (the log's reader was behind)")
        })
        let log = daemon.standardError()
        let refusals = log.split(separator: "\n").filter { $0.contains("request refused") && $0.contains("'held'") }
        #expect(!refusals.isEmpty && refusals.count <= 20, "\(refusals.count) refusals logged of 600")
        withExtendedLifetime(registration) {}
    }
}
