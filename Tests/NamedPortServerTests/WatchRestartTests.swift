import Foundation
import Glibc
import NamedPortServer
import PortKitTestSupport
import Testing

/// `portname watch` across a restart of `portnamed`: it goes on at the new server with
/// what changed while the server was away, as the API's reconnecting watch does.
@Suite("portname watch across a server restart", .serialized)
struct WatchRestartTests {
    private func object(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    /// `event name pid`, from a `watch --json` line.
    private func summary(_ line: String) -> String {
        guard let event = object(line) else { return "not JSON: \(line)" }
        return "\(event["event"] as? String ?? "?") \(event["name"] as? String ?? "?") \(event["pid"] as? Int ?? -1)"
    }

    @Test func watchResumesAtTheRestartedServerWithWhatChanged() throws {
        let directory = TestDirectory()
        let address = directory.address
        let first = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", address])
        #expect(try first.readLine() == "listening on \(address)")
        let before = try SpawnedProcess.helper("names-owner", [address, "w.moved"])
        defer { before.kill() }
        #expect(try before.readLine() == "serving w.moved \(before.pid)")

        let watch = try SpawnedProcess.spawn(ChildProcessPaths.portname, ["--address", address, "watch", "w.", "--json"])
        defer { watch.kill() }
        let initial = try watch.readLine(within: .seconds(60))
        #expect(summary(initial) == "appeared w.moved \(before.pid)" && object(initial)?["initial"] as? Bool == true, "\(initial)")

        // The server dies with its names; a new one starts at the same address, and the
        // name is registered there again, by another process, beside a new one.
        first.signal(SIGKILL)
        #expect(try first.wait() == .signalled(SIGKILL))
        let second = try SpawnedProcess.spawn(ChildProcessPaths.portnamed, ["--address", address])
        defer { second.kill() }
        #expect(try second.readLine() == "listening on \(address)")
        let after = try SpawnedProcess.helper("names-owner", [address, "w.moved"])
        defer { after.kill() }
        #expect(try after.readLine() == "serving w.moved \(after.pid)")
        let added = try SpawnedProcess.helper("names-owner", [address, "w.new"])
        defer { added.kill() }
        #expect(try added.readLine() == "serving w.new \(added.pid)")

        // Whether the watch resumed before or after the registrations, it reports the old
        // owner gone, then the new owners, none twice, each as a change (not initial).
        var seen: [String] = []
        let expected = ["vanished w.moved \(before.pid)", "appeared w.moved \(after.pid)", "appeared w.new \(added.pid)"]
        while !Set(expected).isSubset(of: Set(seen)) {
            let line = try watch.readLine(within: .seconds(60))
            #expect(object(line)?["initial"] as? Bool == false, "\(line)")
            seen.append(summary(line))
        }
        #expect(seen.count == 3, "\(seen)")
        let vanished = try #require(seen.firstIndex(of: expected[0]))
        let appeared = try #require(seen.firstIndex(of: expected[1]))
        #expect(vanished < appeared, "\(seen)")
        // It still runs: a watch ends only when interrupted.
        #expect(throws: (any Error).self) { try watch.wait(within: .milliseconds(10)) }
    }
}
