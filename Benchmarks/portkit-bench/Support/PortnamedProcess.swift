import Glibc
import NamedPortServer

/// A real `portnamed` of this build, started by the bench on a private address (a socket in
/// a fresh temporary directory) and stopped with SIGTERM, as a service manager would.
///
/// It is the `portnamed` executable beside portkit-bench (`swift build -c release --product
/// portnamed`), or the one `PORTKIT_PORTNAMED` names. The bench keeps one connection of its
/// own, the observer, to ask the server's `status()` how many connections it holds.
final class PortnamedProcess: IdleServer {
    let pid: pid_t
    private let daemon: LineChild
    private let directory: String
    private let address: String
    private let observer: NameServerClient

    /// Starts `portnamed` and waits until it accepts connections and answers its status.
    /// - Throws: `BenchmarkError.notMeasurable` when there is no `portnamed` to start,
    ///   `BenchmarkError` or `NameServerError` when it does not start.
    init() throws {
        let path = Self.executablePath
        guard access(path, X_OK) == 0 else {
            throw BenchmarkError.notMeasurable(
                "no portnamed at \(path) (swift build -c release --product portnamed; PORTKIT_PORTNAMED overrides)")
        }
        directory = try BenchFiles.temporaryDirectory("portkit-bench-idle")
        address = directory + "/names.sock"
        do {
            daemon = try LineChild(path, ["--address", address])
        } catch {
            rmdir(directory)
            throw error
        }
        pid = daemon.pid
        do {
            let line = try daemon.readLine(timeout: .seconds(30))
            guard line?.hasPrefix("listening on") == true else {
                throw BenchmarkError.system(operation: "starting portnamed: it said '\(line ?? "nothing")'", errno: 0)
            }
            observer = try NameServerClient.blockingConnect(to: address)
            let serverPID = try observer.status().pid
            guard serverPID == pid else {
                throw BenchmarkError.system(operation: "portnamed at \(address) is process \(serverPID), not \(pid)", errno: 0)
            }
        } catch {
            daemon.stop(signal: SIGTERM)
            Self.remove(directory)
            throw error
        }
    }

    /// Connects `count` clients with `NameServerClient.blockingConnect(to:)`, each of which
    /// lists the names once, so that its hello has been answered.
    func connectIdle(_ count: Int) throws -> IdleClients {
        try IdleClients.connecting(count, {
            let client = try NameServerClient.blockingConnect(to: address)
            do {
                _ = try client.blockingList()
            } catch {
                client.close()
                throw error
            }
            return client
        }, closing: { $0.close() })
    }

    /// Asks the server's status until it counts `count` client connections besides the
    /// observer.
    func waitForClients(_ count: Int, within timeout: Duration) throws {
        var last = -1
        try ProcessProbe.wait(
            until: {
                last = try observer.status().connections - 1
                return last == count
            }, within: timeout, what: "portnamed to hold \(count) client connections (it holds \(last))")
    }

    func stop() {
        observer.close()
        daemon.stop(signal: SIGTERM)
        Self.remove(directory)
    }

    /// `PORTKIT_PORTNAMED`, else `portnamed` beside this executable.
    private static var executablePath: String {
        if let path = getenv("PORTKIT_PORTNAMED") { return String(cString: path) }
        return String(BenchProcess.executable.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/"))
            + "/portnamed"
    }

    private static func remove(_ directory: String) {
        for file in ["names.sock", "names.sock.lock"] { unlink(directory + "/" + file) }
        rmdir(directory)
    }
}
