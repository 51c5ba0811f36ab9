import Glibc

/// The D-Bus side of the names cases: a private bus (`dbus-daemon` with a configuration of
/// its own, in a private directory, never the system or session bus) and the bench's libdbus
/// peer on it (`Benchmarks/dbus/portkit-dbus-peer.c`), which owns a name, serves calls and
/// measures what a libdbus program gets, run by run, on command.
///
/// The peer is a C program so that SwiftPM never links libdbus: `scripts/bench-setup.sh`
/// installs the bus and the library and builds it.
final class DBusPeer: Sendable {
    private let directory: String
    private let daemon: LineChild
    private let peer: LineChild

    /// Starts the bus and the peer and waits until the peer owns its name.
    /// - Throws: `BenchmarkError.notMeasurable` when `dbus-daemon` or the peer is missing or
    ///   does not start, with why.
    init() throws {
        guard let daemonPath = BenchFiles.programOnPath("dbus-daemon") else {
            throw BenchmarkError.notMeasurable("no dbus-daemon on PATH (scripts/bench-setup.sh installs it)")
        }
        let peerPath = Self.peerPath
        guard access(peerPath, X_OK) == 0 else {
            throw BenchmarkError.notMeasurable("no D-Bus peer at \(peerPath) (scripts/bench-setup.sh builds it)")
        }
        var template = Array("/tmp/portkit-bench-dbus-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw BenchmarkError.lastSystemError("mkdtemp")
        }
        let directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.directory = directory
        let daemon: LineChild
        do {
            try Self.writeServiceDirectory(directory + "/services")
            try BenchFiles.write(Self.configuration(listening: directory + "/bus", services: directory + "/services"), to: directory + "/bus.conf")
            daemon = try LineChild(daemonPath, ["--config-file=\(directory)/bus.conf", "--nofork", "--print-address"])
        } catch {
            Self.remove(directory)
            throw error
        }
        self.daemon = daemon
        do {
            guard let address = try daemon.readLine(timeout: .seconds(10)), address.hasPrefix("unix:") else {
                throw BenchmarkError.notMeasurable("dbus-daemon printed no address")
            }
            peer = try LineChild(peerPath, [address])
        } catch {
            daemon.stop(signal: SIGTERM)
            Self.remove(directory)
            throw error
        }
        do {
            let ready = try peer.readLine(timeout: .seconds(10))
            guard ready == "ready" else { throw BenchmarkError.notMeasurable("the D-Bus peer said '\(ready ?? "")'") }
        } catch {
            stop()
            throw error
        }
    }

    /// One run: sends `command` (`lookup COUNT`, `call COUNT SIZE`, `death COUNT`) and
    /// returns the median the peer measured, in µs.
    /// - Throws: `BenchmarkError.timedOut`, or `.system` with the peer's reason when it failed.
    func run(_ command: String) throws -> Double {
        try peer.send(command)
        let answer = try peer.readLine(timeout: .seconds(120)) ?? "fail the D-Bus peer ended"
        guard answer.hasPrefix("ok "), let median = Double(answer.dropFirst(3)) else {
            throw BenchmarkError.system(operation: "D-Bus peer '\(command)': \(answer)", errno: 0)
        }
        return median
    }

    /// Ends the peer (the end of its input), stops the bus and removes its directory.
    func stop() {
        peer.stop()
        daemon.stop(signal: SIGTERM)
        Self.remove(directory)
    }

    // MARK: Set-up

    /// `PORTKIT_DBUS_PEER`, else where `scripts/bench-setup.sh` builds the peer in this
    /// checkout.
    private static var peerPath: String {
        if let path = getenv("PORTKIT_DBUS_PEER") { return String(cString: path) }
        // This file is Benchmarks/portkit-bench/Support/DBusPeer.swift in the checkout.
        let root = String(#filePath).split(separator: "/", omittingEmptySubsequences: false).dropLast(4).joined(separator: "/")
        return root + "/.build/dbus/portkit-dbus-peer"
    }

    /// The name `names.activation`'s D-Bus service owns once the bus has started it.
    static let activatedName = "org.portkit.Bench.Activated"

    /// `PORTKIT_DBUS_SERVICE`, else where `scripts/bench-setup.sh` builds the activated
    /// service (`Benchmarks/dbus/portkit-dbus-service.c`) in this checkout.
    static var servicePath: String {
        if let path = getenv("PORTKIT_DBUS_SERVICE") { return String(cString: path) }
        return (peerPath.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")) + "/portkit-dbus-service"
    }

    /// The bus's service directory: one `.service` file, for `activatedName`.
    private static func writeServiceDirectory(_ services: String) throws {
        guard mkdir(services, 0o700) == 0 else { throw BenchmarkError.lastSystemError("mkdir \(services)") }
        let file = "[D-BUS Service]\nName=\(activatedName)\nExec=\(servicePath)\n"
        try BenchFiles.write(file, to: "\(services)/\(activatedName).service")
    }

    /// A bus on which any connection may send to and own any name (the session bus's
    /// policy), listening only at `path`, starting the services of `services` on demand.
    private static func configuration(listening path: String, services: String) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(path)</listen>
          <servicedir>\(services)</servicedir>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>

        """
    }

    private static func remove(_ directory: String) {
        unlink("\(directory)/services/\(activatedName).service")
        rmdir(directory + "/services")
        unlink(directory + "/bus.conf")
        unlink(directory + "/bus")
        rmdir(directory)
    }
}
