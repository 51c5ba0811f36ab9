import Glibc

/// A server process the `scale.idle-connections` cases measure: started by the bench for one
/// run, its resident memory read from `/proc` while the bench's clients come, idle and leave.
protocol IdleServer: AnyObject {
    /// The process whose memory is measured (the server itself, not a launcher).
    var pid: pid_t { get }

    /// Opens `count` client connections, each answered once by the server (so that the
    /// server has done its per-connection work), and returns them, held open and idle.
    /// - Throws: `BenchmarkError` when a connection fails (the ones made are closed).
    func connectIdle(_ count: Int) throws -> IdleClients

    /// Waits until the server holds exactly `count` connections of the bench's clients
    /// (its own observer, if any, not counted).
    /// - Throws: `BenchmarkError.timedOut` when it does not within `timeout`.
    func waitForClients(_ count: Int, within timeout: Duration) throws

    /// Stops the server and removes what it was given (its directory).
    func stop()
}

/// Client connections held open by the bench, closed all at once.
struct IdleClients {
    /// How many there are.
    let count: Int
    /// Closes them all (the server then sees them go).
    let close: () -> Void

    /// Makes `count` clients with `connect`, closing the ones made if one fails.
    static func connecting<Client>(
        _ count: Int, _ connect: () throws -> Client, closing close: @escaping (Client) -> Void
    ) throws -> IdleClients {
        var clients: [Client] = []
        clients.reserveCapacity(count)
        do {
            for _ in 0..<count { clients.append(try connect()) }
        } catch {
            for client in clients { close(client) }
            throw error
        }
        return IdleClients(count: count) { for client in clients { close(client) } }
    }
}

/// What the bench reads of another process in `/proc`.
enum ProcessProbe {
    /// `pid`'s resident set (`VmRSS` in `/proc/PID/status`), in KiB.
    /// - Throws: `BenchmarkError.system` when the process is gone or the field is missing.
    static func residentKiB(of pid: pid_t) throws -> Int {
        let text = try read("/proc/\(pid)/status")
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            // "VmRSS:\t   12345 kB"
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if fields.count >= 2, let kiB = Int(fields[1]) { return kiB }
        }
        throw BenchmarkError.system(operation: "VmRSS in /proc/\(pid)/status", errno: ENOENT)
    }

    /// The connections a server has accepted on the Unix socket bound at `path` and not yet
    /// closed: the connected sockets `/proc/net/unix` lists at that path (an accepted socket
    /// carries its listener's address; a client's carries none).
    /// - Throws: `BenchmarkError.system` when `/proc/net/unix` cannot be read.
    static func connections(at path: String) throws -> Int {
        guard let file = fopen("/proc/net/unix", "re") else { throw BenchmarkError.lastSystemError("fopen /proc/net/unix") }
        defer { fclose(file) }
        var count = 0
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            // "Num: RefCount Protocol Flags Type St Inode Path": St 03 is connected.
            let fields = String(cString: line).split(separator: " ", omittingEmptySubsequences: true)
            if fields.count == 8, fields[5] == "03", fields[7].dropLast(fields[7].hasSuffix("\n") ? 1 : 0) == path { count += 1 }
        }
        return count
    }

    /// The first child of `parent` whose command (`comm`) is `command`, or `nil`.
    static func child(of parent: pid_t, named command: String) -> pid_t? {
        guard let directory = opendir("/proc") else { return nil }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let pid = pid_t(name), let stat = try? read("/proc/\(pid)/stat") else { continue }
            // "PID (COMM) STATE PPID ...": the command may hold spaces and parentheses.
            guard let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if String(stat[stat.index(after: open)..<close]) == command, fields.count > 1, pid_t(fields[1]) == parent {
                return pid
            }
        }
        return nil
    }

    /// `pid`'s resident set once it has settled: the same for `quiet` (read every 50 ms), or
    /// as it is after `limit`.
    static func settledResidentKiB(of pid: pid_t, quiet: Duration = .seconds(2), limit: Duration = .seconds(15)) throws -> Int {
        let end = ContinuousClock.now + limit
        var value = try residentKiB(of: pid)
        var since = ContinuousClock.now
        while ContinuousClock.now < end, since.duration(to: .now) < quiet {
            usleep(50_000)   // the sampling period, not a wait for an event
            let now = try residentKiB(of: pid)
            if now != value { (value, since) = (now, .now) }
        }
        return value
    }

    /// Waits until `condition` holds, checking it again and again until `timeout`.
    /// - Throws: `BenchmarkError.timedOut` naming `what`, or what `condition` throws.
    static func wait(until condition: () throws -> Bool, within timeout: Duration, what: @autoclosure () -> String) throws {
        let deadline = ContinuousClock.now + timeout
        while try !condition() {
            guard ContinuousClock.now < deadline else { throw BenchmarkError.timedOut(what()) }
            sched_yield()
        }
    }

    private static func read(_ path: String) throws -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw BenchmarkError.lastSystemError("open \(path)") }
        defer { Glibc.close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        let count = bytes.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { throw BenchmarkError.lastSystemError("read \(path)") }
        return String(decoding: bytes.prefix(count), as: UTF8.self)
    }
}
