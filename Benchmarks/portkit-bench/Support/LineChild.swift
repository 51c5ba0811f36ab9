import CPortKitSystem
import Glibc
import Synchronization

/// A child program that speaks in lines: its standard input and output are pipes to this
/// process. The D-Bus baselines run the bus daemon and the bench's libdbus peer this way,
/// the SocketPort baseline its driver.
final class LineChild: Sendable {
    /// The child's process id.
    let pid: pid_t
    private let input: CInt
    private let output: CInt
    private let pending = Mutex<[UInt8]>([])

    /// Starts `path` with `arguments` (without the program name); its standard error is this
    /// process's, or with `discardingErrors`, `/dev/null`. The child gets `descriptors` at 3,
    /// 4, ... (a listening socket handed over as systemd would, say).
    /// - Throws: `BenchmarkError.system` when a pipe or `posix_spawn` fails.
    init(_ path: String, _ arguments: [String], discardingErrors: Bool = true, descriptors: [CInt] = []) throws(BenchmarkError) {
        var toChild: (CInt, CInt) = (-1, -1)
        var fromChild: (CInt, CInt) = (-1, -1)
        guard withUnsafeMutableBytes(of: &toChild, { portkit_pipe2($0.baseAddress!.assumingMemoryBound(to: CInt.self), O_CLOEXEC) }) == 0
        else { throw .lastSystemError("pipe2") }
        guard withUnsafeMutableBytes(of: &fromChild, { portkit_pipe2($0.baseAddress!.assumingMemoryBound(to: CInt.self), O_CLOEXEC) }) == 0
        else {
            close(toChild.0)
            close(toChild.1)
            throw .lastSystemError("pipe2")
        }
        defer {
            close(toChild.0)
            close(fromChild.1)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild.0, 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild.1, 1)
        if discardingErrors { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
        // As `BenchProcess.spawn`: the sources are close-on-exec, and dup2 gives the child copies.
        for (index, fd) in descriptors.enumerated() {
            precondition(fd > CInt(2 + descriptors.count), "descriptor \(fd) would be overwritten")
            posix_spawn_file_actions_adddup2(&actions, fd, CInt(3 + index))
        }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard status == 0 else {
            close(toChild.1)
            close(fromChild.0)
            throw .system(operation: "posix_spawn \(path)", errno: status)
        }
        self.pid = pid
        input = toChild.1
        output = fromChild.0
    }

    /// Writes `line` and a newline to the child's input.
    /// - Throws: `BenchmarkError.system` when the child no longer reads (it ended).
    func send(_ line: String) throws(BenchmarkError) {
        let text = line + "\n"
        let wrote = text.utf8CString.withUnsafeBufferPointer { portkit_write_nosigpipe(input, $0.baseAddress, $0.count - 1) }
        guard wrote == text.utf8.count else { throw .lastSystemError("write to \(pid)") }
    }

    /// The child's next line, without its newline; `nil` at the end of its output.
    /// - Throws: `BenchmarkError.timedOut` when no whole line comes within `timeout`.
    func readLine(timeout: Duration) throws(BenchmarkError) -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let line = pending.withLock({ buffer -> String? in
                guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
                defer { buffer.removeSubrange(...newline) }
                return String(decoding: buffer[..<newline], as: UTF8.self)
            }) {
                return line
            }
            let left = deadline - .now
            guard left > .zero else { throw .timedOut("a line from process \(pid) within \(timeout)") }
            let ready = portkit_poll_one(output, CShort(POLLIN), CInt(left.seconds * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready >= 0 else { throw .lastSystemError("poll") }
            guard ready > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let got = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { return nil }
            pending.withLock { $0 += chunk[..<got] }
        }
    }

    /// Waits for the child to end; returns its raw wait status (0 once it was waited for).
    @discardableResult
    func wait() -> CInt {
        var status: CInt = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status
    }

    /// Sends `signal` (a child that still reads ends at the end of its input instead), closes
    /// the pipes and waits for the child.
    func stop(signal: CInt? = nil) {
        if let signal { kill(pid, signal) }
        close(input)
        close(output)
        wait()
    }
}
