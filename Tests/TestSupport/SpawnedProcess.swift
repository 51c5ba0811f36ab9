import Foundation
import Glibc
import PermanentThread
import PortKitSystem

/// A real child process of the tests (the test helper, `portnamed`, `portname`), with
/// its standard output read line by line against deadlines, and killed for real.
///
/// Spawned with `posix_spawn`, so the tests can hand it extra descriptors (a listening
/// socket for systemd-style activation) and run it as another user (through `setpriv`).
package final class SpawnedProcess: @unchecked Sendable {
    // Safety of @unchecked Sendable: the mutable state (`buffer`, `exitStatus`, `eof`) is
    // only touched under `lock`; `pid` and the descriptors are immutable after init.
    package let pid: pid_t
    package let command: String
    private let stdoutRead: CInt
    private let stdinWrite: CInt
    private let stderrRead: CInt
    private let lock = NSLock()
    private var buffer: [UInt8] = []
    private var eof = false
    private var exitStatus: Termination?
    private var errorBytes: [UInt8] = []

    /// How a child ended.
    package enum Termination: Equatable, CustomStringConvertible {
        case exited(Int32)
        case signalled(Int32)

        package var description: String {
            switch self {
            case .exited(let code): return "exit \(code)"
            case .signalled(let signal): return "signal \(signal)"
            }
        }
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String

        /// A failure that says `description`.
        package init(description: String) { self.description = description }
    }

    // MARK: Finding the executables

    /// The directory holding the built products (the helper, `portnamed`, `portname`).
    package static let productsDirectory: String = {
        var directory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("portkit-test-helper").path),
              directory.path != "/" {
            directory = directory.deletingLastPathComponent()
        }
        return directory.path
    }()

    package static func product(_ name: String) -> String { productsDirectory + "/" + name }

    /// Starts `portkit-test-helper scenario arguments…`.
    package static func helper(_ scenario: String, _ arguments: [String] = [], asUser user: String? = nil) throws -> SpawnedProcess {
        try spawn(product("portkit-test-helper"), [scenario] + arguments, asUser: user)
    }

    // MARK: Spawning

    /// Spawns `executable arguments…`.
    /// - Parameters:
    ///   - environment: variables set (or, with `nil`, removed) on top of this process's.
    ///   - descriptors: descriptors of this process to give the child at given numbers.
    ///   - asUser: run it as this user through `setpriv` (the tests run as root).
    ///   - viaShell: a shell command prefix run with `sh -c`, `"$@"` being the command.
    package static func spawn(
        _ executable: String, _ arguments: [String], environment: [String: String?] = [:],
        descriptors: [CInt: CInt] = [:], asUser user: String? = nil, viaShell shellPrefix: String? = nil
    ) throws -> SpawnedProcess {
        var argv = [executable] + arguments
        if let user {
            argv = ["/usr/bin/setpriv", "--reuid=\(user)", "--regid=\(user == "nobody" ? "nogroup" : user)", "--clear-groups", "--"] + argv
        }
        if let shellPrefix {
            argv = ["/bin/sh", "-c", shellPrefix + " \"$@\"", "sh"] + argv
        }
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        let envp = env.map { "\($0.key)=\($0.value)" }

        let pipes = try (0..<3).map { _ in try FileDescriptor.pipe() }
        let input = [pipes[0].read.rawValue, pipes[0].write.rawValue]
        let out = [pipes[1].read.rawValue, pipes[1].write.rawValue]
        let err = [pipes[2].read.rawValue, pipes[2].write.rawValue]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        posix_spawn_file_actions_adddup2(&actions, out[1], 1)
        posix_spawn_file_actions_adddup2(&actions, err[1], 2)
        for (target, source) in descriptors {
            posix_spawn_file_actions_adddup2(&actions, source, target)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The child starts with no blocked signals (a parent thread may block some).
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))

        var pid: pid_t = 0
        let status = withCStrings(argv) { cArgv in
            withCStrings(envp) { cEnv in
                posix_spawn(&pid, argv[0], &actions, &attributes, cArgv, cEnv)
            }
        }
        close(input[0]); close(out[1]); close(err[1])
        guard status == 0 else {
            close(input[1]); close(out[0]); close(err[0])
            throw Failure(description: "posix_spawn \(argv[0]): errno \(status)")
        }
        return SpawnedProcess(
            pid: pid, command: argv.joined(separator: " "), stdoutRead: out[0], stdinWrite: input[1], stderrRead: err[0])
    }

    private init(pid: pid_t, command: String, stdoutRead: CInt, stdinWrite: CInt, stderrRead: CInt) {
        self.pid = pid
        self.command = command
        self.stdoutRead = stdoutRead
        self.stdinWrite = stdinWrite
        self.stderrRead = stderrRead
    }

    deinit {
        if exitStatus == nil {
            Glibc.kill(pid, SIGKILL)
            var status: CInt = 0
            waitpid(pid, &status, 0)
        }
        close(stdoutRead)
        close(stderrRead)
        if stdinWrite >= 0 { close(stdinWrite) }
    }

    // MARK: Talking to it

    /// The next line of its standard output, waiting until `deadline`.
    /// - Throws: when the deadline passes or the output ends first.
    package func readLine(within timeout: Duration = .seconds(30)) throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            let line: String? = lock.withLock {
                guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            if let line { return line }
            if lock.withLock({ eof }) {
                throw Failure(description: "\(command): output ended without a line; stderr: \(standardError())")
            }
            let left = deadline - .now
            guard left > .zero else {
                throw Failure(description: "\(command): no line within \(timeout); stderr: \(standardError())")
            }
            readChunk(waitingUpTo: left)
        }
    }

    /// Reads lines until one satisfies `match`; returns it.
    package func readLine(within timeout: Duration = .seconds(30), until match: (String) -> Bool) throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            let line = try readLine(within: max(deadline - .now, .milliseconds(1)))
            if match(line) { return line }
        }
    }

    /// Every line until the output ends (use after it exits), up to `timeout`.
    package func remainingLines(within timeout: Duration = .seconds(30)) throws -> [String] {
        var lines: [String] = []
        while true {
            do {
                lines.append(try readLine(within: timeout))
            } catch {
                if lock.withLock({ eof }) {
                    let rest = lock.withLock { String(decoding: buffer, as: UTF8.self) }
                    if !rest.isEmpty { lines.append(rest) }
                    return lines
                }
                throw error
            }
        }
    }

    /// Everything it writes on its standard output from here until the output ends, byte
    /// for byte (for a child that exits by itself), up to `timeout`.
    /// - Throws: when the deadline passes first.
    package func remainingOutput(within timeout: Duration = .seconds(60)) throws -> String {
        let deadline = ContinuousClock.now + timeout
        while !lock.withLock({ eof }) {
            let left = deadline - .now
            guard left > .zero else {
                throw Failure(description: "\(command): output did not end within \(timeout); stderr: \(standardError())")
            }
            readChunk(waitingUpTo: left)
        }
        return lock.withLock {
            defer { buffer.removeAll() }
            return String(decoding: buffer, as: UTF8.self)
        }
    }

    /// Reads what its standard output has into `buffer` (or notes its end), waiting up to
    /// `left` (at most a second) for something to come.
    private func readChunk(waitingUpTo left: Duration) {
        var poller = pollfd(fd: stdoutRead, events: Int16(POLLIN), revents: 0)
        let milliseconds = CInt(max(1, min(left / .milliseconds(1), 1000)))
        guard poll(&poller, 1, milliseconds) > 0 else { return }
        var chunk = [UInt8](repeating: 0, count: 4096)
        let count = read(stdoutRead, &chunk, chunk.count)
        lock.withLock {
            if count > 0 { buffer += chunk[..<count] } else if count == 0 { eof = true }
        }
    }

    /// Writes a line to its standard input.
    package func send(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(stdinWrite, $0.baseAddress, $0.count) }
    }

    /// Everything it wrote on its standard error so far (reads what is there, without waiting).
    package func standardError() -> String {
        lock.withLock {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                var poller = pollfd(fd: stderrRead, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 0) > 0 else { break }
                let count = read(stderrRead, &chunk, chunk.count)
                guard count > 0 else { break }
                errorBytes += chunk[..<count]
            }
            return String(decoding: errorBytes, as: UTF8.self)
        }
    }

    // MARK: Ending it

    /// Sends `signal`.
    package func signal(_ signal: Int32) {
        Glibc.kill(pid, signal)
    }

    /// Stops it (SIGSTOP) and waits, up to `timeout`, until every thread of it is stopped:
    /// each thread stops only as it next enters the kernel, so a busy process runs on for a
    /// moment after `kill` returns.
    /// - Throws: when a thread still runs at the deadline.
    package func stop(within timeout: Duration = .seconds(10)) throws {
        Glibc.kill(pid, SIGSTOP)
        guard eventually(timeout: timeout, { threadsStopped(ofProcess: pid) }) else {
            throw Failure(description: "process \(pid) did not stop within \(timeout)")
        }
    }

    /// Waits for it to end, up to `timeout`.
    /// - Throws: when it is still running at the deadline.
    @discardableResult
    package func wait(within timeout: Duration = .seconds(30)) throws -> Termination {
        if let status = lock.withLock({ exitStatus }) { return status }
        let deadline = ContinuousClock.now + timeout
        while true {
            var status: CInt = 0
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                let termination: Termination = (status & 0x7F) == 0
                    ? .exited((status >> 8) & 0xFF) : .signalled(status & 0x7F)
                lock.withLock { exitStatus = termination }
                return termination
            }
            guard ContinuousClock.now < deadline else {
                throw Failure(description: "\(command) still runs after \(timeout)")
            }
            usleep(1000)
        }
    }

    /// SIGKILLs it and reaps it.
    package func kill() {
        signal(SIGKILL)
        _ = try? wait(within: .seconds(30))
    }
}

/// Runs `body` with a NULL-terminated C array of the strings.
private func withCStrings<R>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return body(pointers)
}
