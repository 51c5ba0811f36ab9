import CPortKitSystem
import Glibc

/// A private `dbus-broker` (Debian's `dbus-broker` package), started by the bench for one run,
/// never the system or session bus: `dbus-broker-launch` with a configuration of its own,
/// given a listening socket in a fresh temporary directory as systemd would (`LISTEN_FDS`),
/// and its clients speaking raw D-Bus (`RawDBusClient`).
///
/// The launcher logs to the journal's socket, `/run/systemd/journal/socket`, and will not
/// start without it; nor without a bus of its own to watch units on, the one it serves
/// (`DBUS_SESSION_BUS_ADDRESS`). So it runs in a private mount namespace (`unshare -m`, or
/// `unshare -r -m` for a user other than root) whose `/run` is an empty tmpfs and whose
/// `/run/systemd` leads to the directory, where the bench reads and drops the log.
final class DBusBrokerProcess: IdleServer {
    /// The broker, the launcher's child: the process that holds the connections.
    let pid: pid_t
    private let launcher: LineChild
    private let journal: JournalSink
    private let directory: String
    private let busPath: String

    /// Starts the launcher and waits until its broker answers a hello.
    /// - Throws: `BenchmarkError.notMeasurable` when `dbus-broker-launch` or `unshare` is
    ///   missing, `BenchmarkError` when the broker does not start.
    init() throws {
        guard let launch = BenchFiles.programOnPath("dbus-broker-launch"), BenchFiles.programOnPath("dbus-broker") != nil else {
            throw BenchmarkError.notMeasurable("no dbus-broker-launch on PATH (scripts/bench-setup.sh installs dbus-broker)")
        }
        guard let unshare = BenchFiles.programOnPath("unshare") else {
            throw BenchmarkError.notMeasurable("no unshare on PATH, to give dbus-broker-launch a journal socket of its own")
        }
        var template = Array("/tmp/portkit-bench-broker-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw BenchmarkError.lastSystemError("mkdtemp")
        }
        let directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.directory = directory
        busPath = directory + "/bus"
        var started: (journal: JournalSink, launcher: LineChild)?
        do {
            for subdirectory in ["/systemd", "/systemd/journal"] where mkdir(directory + subdirectory, 0o700) != 0 {
                throw BenchmarkError.lastSystemError("mkdir \(directory + subdirectory)")
            }
            try BenchFiles.write(Self.configuration, to: directory + "/bus.conf")
            let journal = try JournalSink(at: directory + "/systemd/journal/socket")
            let listener = try RawSockets.bound(SOCK_STREAM, at: busPath)
            defer { close(listener) }
            let script = """
                mount -t tmpfs tmpfs /run && ln -s "$1" /run/systemd || exit 1
                export DBUS_SESSION_BUS_ADDRESS="unix:path=$2" LISTEN_PID=$$ LISTEN_FDS=1
                exec "$3" --scope user --config-file "$4"
                """
            let namespace = geteuid() == 0 ? ["-m"] : ["-r", "-m"]
            let launcher = try LineChild(
                unshare, namespace + ["/bin/sh", "-c", script, "sh", directory + "/systemd", busPath, launch, directory + "/bus.conf"],
                descriptors: [listener])
            started = (journal, launcher)
            // A hello answered means the broker runs; with the probe connected, the launcher's
            // own connection is the other one, once the broker has accepted it.
            let probe = try RawDBusClient(connectingTo: busPath)
            defer { probe.close() }
            guard let broker = ProcessProbe.child(of: launcher.pid, named: "dbus-broker") else {
                throw BenchmarkError.system(operation: "finding dbus-broker, the child of dbus-broker-launch \(launcher.pid)", errno: ESRCH)
            }
            pid = broker
            self.journal = journal
            self.launcher = launcher
            try ProcessProbe.wait(
                until: { try ProcessProbe.connections(at: busPath) == 2 }, within: .seconds(10),
                what: "dbus-broker-launch to connect to its broker")
        } catch {
            started?.launcher.stop(signal: SIGTERM)
            started?.journal.stop()
            Self.remove(directory)
            throw error
        }
        do {
            try waitForClients(0, within: .seconds(10))
        } catch {
            stop()
            throw error
        }
    }

    /// Connects `count` raw D-Bus clients, each answered its hello.
    func connectIdle(_ count: Int) throws -> IdleClients {
        try IdleClients.connecting(count, { try RawDBusClient(connectingTo: busPath) }, closing: { $0.close() })
    }

    /// Counts the bus socket's accepted connections until they are the launcher's and `count`
    /// others: the broker frees a peer as it closes the peer's socket.
    func waitForClients(_ count: Int, within timeout: Duration) throws {
        var last = -1
        try ProcessProbe.wait(
            until: {
                last = try ProcessProbe.connections(at: busPath) - 1
                return last == count
            }, within: timeout, what: "dbus-broker to hold \(count) client connections (it holds \(last))")
    }

    func stop() {
        // The broker first, so that its parent reaps it: the launcher sees it end and exits
        // too. Ended the other way, the broker would be left to an init that may not reap.
        kill(pid, SIGTERM)
        try? ProcessProbe.wait(until: { access("/proc/\(pid)", F_OK) != 0 }, within: .seconds(5), what: "dbus-broker to end")
        launcher.stop(signal: SIGTERM)
        journal.stop()
        Self.remove(directory)
    }

    // MARK: Set-up

    /// A session-like bus on which any connection may talk to and own any name, with room
    /// for the connections of one user the cases open. It listens on the socket it is given.
    private static let configuration = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <auth>EXTERNAL</auth>
          <limit name="max_connections_per_user">100000</limit>
          <policy context="default">
            <allow send_destination="*"/>
            <allow own="*"/>
          </policy>
        </busconfig>

        """

    private static func remove(_ directory: String) {
        for file in ["/systemd/journal/socket", "/bus", "/bus.conf"] { unlink(directory + file) }
        for subdirectory in ["/systemd/journal", "/systemd", ""] { rmdir(directory + subdirectory) }
    }
}

/// The journal socket the launcher and its broker log to: a datagram socket whose messages a
/// thread reads and drops, so that no writer ever finds it full.
private final class JournalSink: Sendable {
    private let socket: CInt
    private let reader: PosixThread

    /// Binds the socket at `path` and starts its reader.
    /// - Throws: `BenchmarkError.system` when the socket or the thread cannot be made.
    init(at path: String) throws(BenchmarkError) {
        let socket = try RawSockets.bound(SOCK_DGRAM, at: path)
        do throws(BenchmarkError) {
            reader = try PosixThread.start(name: "bench-journal") {
                var buffer = [UInt8](repeating: 0, count: 1 << 16)
                while true {
                    let got = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
                    if got < 0 && errno == EINTR { continue }
                    if got <= 0 { return }
                }
            }
        } catch {
            close(socket)
            throw error
        }
        self.socket = socket
    }

    /// Ends the reader (a shut-down socket reads as ended) and closes the socket.
    func stop() {
        shutdown(socket, CInt(SHUT_RDWR))
        reader.join()
        close(socket)
    }
}
