import Foundation
import Glibc
import NamedPortServer
import PermanentThread
import PortKitTestSupport
import Testing
import PortKitSystem

/// `portnamed` gives back the memory of clients that have left: a crowd of clients that
/// comes and goes leaves it near the size it had before, not at its peak.
@Suite(
    "portnamed: memory after clients leave",
    .enabled(if: !Sanitizer.isActive, "a sanitizer's allocator keeps freed memory and ignores malloc_trim"))
struct DaemonMemoryTests {
    /// `pid`'s resident set in KiB (`VmRSS`).
    private func residentKiB(_ pid: pid_t) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        return try #require(Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" })[1]))
    }

    @Test func aCrowdThatLeftLeavesTheDaemonNearItsStartingSize() throws {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        let crowd = min(1000, Int(limit.rlim_max) - 100)
        if limit.rlim_cur < rlim_t(crowd + 100) {
            limit.rlim_cur = rlim_t(crowd + 100)
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        let directory = TestDirectory()
        let daemon = try SpawnedProcess.spawn(SpawnedProcess.product("portnamed"), ["--address", directory.address])
        defer { daemon.kill() }
        #expect(try daemon.readLine(within: .seconds(60)) == "listening on \(directory.address)")
        let observer = try NameServerClient.blockingConnect(to: directory.address)
        defer { observer.close() }
        // A few clients first, so that the code a connection runs is resident before the
        // measure starts: what is compared is the memory the crowd took, not the pages of
        // code it was the first to run (which stay, as in any program).
        var warmUp: [FileDescriptor] = []
        for _ in 0..<20 {
            let client = try UnixSocket.make(nonBlocking: false)
            warmUp.append(client)
            try UnixSocket.connect(client, to: directory.address)
        }
        #expect(try eventually(timeout: .seconds(60)) { try observer.status().connections == warmUp.count + 1 })
        for client in warmUp { try? client.close() }
        #expect(try eventually(timeout: .seconds(60)) { try observer.status().connections == 1 })
        let before = try residentKiB(daemon.pid)

        var clients: [FileDescriptor] = []
        for _ in 0..<crowd {
            let client = try UnixSocket.make(nonBlocking: false)
            clients.append(client)
            try UnixSocket.connect(client, to: directory.address)
        }
        // The daemon has taken them all in (their connections cost it memory) ...
        #expect(try eventually(timeout: .seconds(120)) { try observer.status().connections == crowd + 1 })
        let peak = try residentKiB(daemon.pid)
        #expect(peak > before + crowd, "before \(before) KiB, with \(crowd) clients \(peak) KiB")
        for client in clients { try? client.close() }
        #expect(try eventually(timeout: .seconds(120)) { try observer.status().connections == 1 })
        // ... and once they have gone, it comes back within 5 % of where it started.
        let settled = try eventually(timeout: .seconds(60)) { try residentKiB(daemon.pid) <= before + before / 20 }
        let now = try residentKiB(daemon.pid)
        #expect(settled, "before \(before) KiB, with \(crowd) clients \(peak) KiB, now \(now) KiB")
    }
}
