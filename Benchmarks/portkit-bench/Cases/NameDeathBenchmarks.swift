import CPortKitSystem
import Glibc
import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitSystem

/// `names.death` and `names.death-floor`: how soon a name's end is told once its owner's
/// process is killed, and the kernel's part of that alone.
extension NameBenchmarks {
    // MARK: names.death

    /// `names.death`: from SIGKILL of the process holding a name's connection to the
    /// watcher's `-` event. The owner is a minimal process (`/bin/sleep`) that inherited a
    /// connection on which the name was registered, so the time is the kernel's teardown
    /// of a process plus the server noticing and telling the watcher. `raw` is the kernel's
    /// part alone: SIGKILL of a `/bin/sleep` holding one end of a socket pair until the
    /// other end, in this process, polls as hung up.
    static func death(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.death", unit: "µs", impls: [
            BenchmarkImpl("portkit") {
                let fixture = try NameFixture()
                let watcher = try NameServerClient.blockingConnect(to: fixture.address)
                let watch = try watcher.blockingWatch(prefix: "bench.death")
                return .init(
                    measure: {
                        try medianMicroseconds(count) { try deathOnce(fixture.address, watch) }
                    },
                    stop: {
                        watch.cancel()
                        watcher.close()
                        fixture.stop()
                    })
            },
            BenchmarkImpl("raw") {
                .init(measure: { try medianMicroseconds(count) { try rawDeathOnce() } })
            },
            BenchmarkImpl("raw-relayed") {
                let relay = try RawDeathRelay()
                return .init(
                    measure: { try medianMicroseconds(count) { try relayedDeathOnce(relay) } },
                    stop: relay.stop)
            },
            DBusBenchmarks.death(count: count),
        ])
    }

    /// `raw`'s death told through a relay thread: the same victim, one hop more. As in the
    /// PortKit impl, the relay takes its end before the victim is spawned.
    private static func relayedDeathOnce(_ relay: RawDeathRelay) throws -> Duration {
        let fds = try RawSockets.streamPair()
        do {
            try relay.watch(fds.0)
        } catch {
            close(fds.0)
            close(fds.1)
            throw error
        }
        let holder: pid_t
        do {
            holder = try spawnHolder(fds.1)
        } catch {
            close(fds.1)  // the relay sees the hang-up and closes its end
            throw error
        }
        close(fds.1)
        return try relay.killAndAwaitWord(holder)
    }

    // MARK: names.death-floor

    /// `names.death-floor`: the kernel's part of `names.death` alone (SIGKILL → the other end
    /// of a socket the victim held polls as hung up), for three kinds of victim. In
    /// `do_exit` the kernel tears the address space down (`exit_mm`) before it closes the
    /// files (`exit_files`), so the floor grows with the victim:
    /// - `fresh-sleep`: `/bin/sleep` killed as soon as `posix_spawn` returns, still starting
    ///   up: what `names.death` kills, in both of its impls;
    /// - `settled-sleep`: `/bin/sleep` once it sleeps (its `/proc` state is `S`);
    /// - `settled-swift`: this executable (Swift, Foundation, PortKit loaded) as its
    ///   `raw-echo` child, once it has echoed a byte and sleeps in `read`: an owner of the
    ///   kind a PortKit program is.
    static func deathFloor(count: Int) -> BenchmarkCase {
        BenchmarkCase(name: "names.death-floor", unit: "µs", impls: [
            BenchmarkImpl("fresh-sleep") {
                .init(measure: { try medianMicroseconds(count) { try rawDeathOnce() } })
            },
            BenchmarkImpl("settled-sleep") {
                .init(measure: { try medianMicroseconds(count) { try rawDeathOnce(settled: true) } })
            },
            BenchmarkImpl("settled-swift") {
                .init(measure: { try medianMicroseconds(count) { try swiftDeathOnce() } })
            },
        ])
    }

    /// SIGKILL of this executable's `raw-echo` child, settled, until its channel hangs up.
    private static func swiftDeathOnce() throws -> Duration {
        let fds = try RawSockets.streamPair()
        defer { close(fds.0) }
        let child = try BenchProcess.spawn(["raw-echo"], descriptors: [fds.1])
        close(fds.1)
        var byte: UInt8 = 1
        guard send(fds.0, &byte, 1, CInt(MSG_NOSIGNAL)) == 1, recv(fds.0, &byte, 1, 0) == 1 else {
            kill(child.pid, SIGKILL)
            var status: CInt = 0
            waitpid(child.pid, &status, 0)
            throw BenchmarkError.lastSystemError("echo from the raw-echo child")
        }
        try waitUntilAsleep(child.pid)
        return try killAndAwaitHangUp(child.pid, fds.0)
    }

    /// SIGKILL of a `/bin/sleep` holding one end of a socket pair until this end polls as
    /// hung up; `settled`: once the sleep sleeps, else at once after the spawn.
    private static func rawDeathOnce(settled: Bool = false) throws -> Duration {
        let fds = try RawSockets.streamPair()
        defer { close(fds.0) }
        let holder = try spawnHolder(fds.1)
        close(fds.1)
        if settled { try waitUntilAsleep(holder) }
        return try killAndAwaitHangUp(holder, fds.0)
    }

    private static func killAndAwaitHangUp(_ pid: pid_t, _ socket: CInt) throws -> Duration {
        guard let elapsed = killAndTime(pid, untilReadable: socket) else {
            throw BenchmarkError.timedOut("the holder's end to hang up")
        }
        return elapsed
    }

    /// Polls `/proc/PID/stat` until the process sleeps (state `S`), for at most 5 s.
    private static func waitUntilAsleep(_ pid: pid_t) throws {
        let path = "/proc/\(pid)/stat"
        let deadline = ContinuousClock.now + .seconds(5)
        var buffer = [UInt8](repeating: 0, count: 512)
        while ContinuousClock.now < deadline {
            let file = open(path, O_RDONLY | O_CLOEXEC)
            guard file >= 0 else { throw BenchmarkError.lastSystemError("open \(path)") }
            let count = buffer.withUnsafeMutableBytes { read(file, $0.baseAddress, $0.count) }
            close(file)
            // The state is the field after the command name, which ends with the last ')'.
            if count > 0, let close = buffer[..<count].lastIndex(of: UInt8(ascii: ")")), close + 2 < count,
               buffer[close + 2] == UInt8(ascii: "S") {
                return
            }
            sched_yield()
        }
        throw BenchmarkError.timedOut("process \(pid) to sleep")
    }

    private static func deathOnce(_ address: String, _ watch: NameWatch) throws -> Duration {
        let name = "bench.death"
        var connection = try RawNameConnection(address: address)
        try connection.register(name)
        guard case .appeared? = try watch.next(timeout: .seconds(10)) else {
            throw BenchmarkError.timedOut("the watcher to see \(name) appear")
        }
        let owner = try spawnHolder(connection.socket, connection.portEnd)
        connection.close()
        let start = ContinuousClock.now
        kill(owner, SIGKILL)
        let event = try watch.next(timeout: .seconds(10))
        let elapsed = start.duration(to: .now)
        var status: CInt = 0
        waitpid(owner, &status, 0)
        guard case .vanished? = event else { throw BenchmarkError.timedOut("the watcher to see \(name) vanish") }
        return elapsed
    }

    /// Starts `/bin/sleep` holding `sockets` as its descriptors 3, 4, ….
    static func spawnHolder(_ sockets: CInt...) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (index, socket) in sockets.enumerated() { posix_spawn_file_actions_adddup2(&actions, socket, 3 + CInt(index)) }
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("600"), nil]
        defer { for pointer in argv { free(pointer) } }
        let status = posix_spawn(&pid, "/bin/sleep", &actions, nil, argv, environ)
        guard status == 0 else { throw BenchmarkError.system(operation: "posix_spawn /bin/sleep", errno: status) }
        return pid
    }
}
