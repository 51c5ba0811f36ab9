import Glibc
import PermanentThread
import PortKitSystem
import PortKitLocks

/// Where `portnamed`'s log lines go: its standard error, written without ever waiting.
///
/// The server's thread logs as it serves, so a write that blocked on a full pipe (a log
/// reader that stalled) would stop the server. Every write here is non-blocking: a line
/// the descriptor does not take at once waits in a bounded buffer, sent ahead of the next
/// line; a line that finds the buffer full is dropped and counted, and once the reader
/// takes lines again a line says how many were dropped. Lines never interleave (one
/// writer at a time, under the lock) and a line is never cut short.
package final class LogOutput: Sendable {
    /// The process's standard error, shared by every `DaemonLog`.
    package static let standardError = LogOutput(descriptor: STDERR_FILENO)

    /// The most bytes kept for a reader that is behind.
    static let bufferLimit = 64 * 1024

    /// How a write reaches the descriptor without waiting.
    private enum Target {
        /// A socket (the journal's stream): `send` with `MSG_DONTWAIT`.
        case socket(CInt)
        /// A pipe or fifo reopened through `/proc/self/fd` with `O_NONBLOCK`: a description
        /// of our own, so neither the standard output that shares the pipe (`2>&1`) nor
        /// another process is made non-blocking.
        case nonBlocking(FileDescriptor)
        /// A regular file or a terminal, which do not wait on a reader: plain `write`.
        case plain(CInt)
    }

    private struct State {
        /// Bytes taken and not yet written, whole lines (the first maybe begun).
        var pending: [UInt8] = []
        /// Lines dropped since the last said so.
        var dropped = 0
    }

    private let target: Target
    private let state = Locked(State())

    /// An output to `descriptor`, opened as its kind allows.
    init(descriptor: CInt) {
        target = Self.target(for: descriptor)
    }

    private static func target(for descriptor: CInt) -> Target {
        guard let status = try? FileSystem.status(FileDescriptor(rawValue: descriptor)) else { return .plain(descriptor) }
        switch status.mode & S_IFMT {
        case S_IFSOCK:
            return .socket(descriptor)
        case S_IFIFO:
            let reopened = try? FileDescriptor.open("/proc/self/fd/\(descriptor)", flags: O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            return reopened.map { .nonBlocking($0) } ?? .plain(descriptor)
        default:
            return .plain(descriptor)
        }
    }

    /// How many lines were dropped and not yet reported (for tests and the exit line).
    var droppedLines: Int { state.withLock { $0.dropped } }

    /// Writes `line` (ending in a newline) now if the descriptor takes it, else keeps it
    /// while there is room, else drops it. Never waits.
    func write(_ line: String) {
        state.withLock { state in
            flush(&state)
            if state.dropped > 0, state.pending.isEmpty {
                let note = "portnamed: warning: \(state.dropped) log lines dropped (the log's reader was behind)\n"
                state.dropped = 0
                state.pending.append(contentsOf: note.utf8)
                flush(&state)
            }
            let bytes = line.utf8
            guard state.pending.count + bytes.count <= Self.bufferLimit else {
                state.dropped += 1
                return
            }
            state.pending.append(contentsOf: bytes)
            flush(&state)
        }
    }

    /// Writes what the descriptor takes of the pending bytes, without waiting.
    private func flush(_ state: inout State) {
        while !state.pending.isEmpty {
            let written = state.pending.withUnsafeBytes { bytes -> Int in
                switch target {
                case .socket(let descriptor):
                    return (try? FileDescriptor(rawValue: descriptor).send(bytes)) ?? -1
                case .nonBlocking(let descriptor):
                    return (try? descriptor.writeWithoutSignal(bytes)) ?? -1
                case .plain(let descriptor):
                    return (try? FileDescriptor(rawValue: descriptor).writeWithoutSignal(bytes)) ?? -1
                }
            }
            guard written > 0 else {
                // Full (EAGAIN), or the reader is gone (EPIPE): what is pending waits, and
                // is dropped when the buffer fills.
                return
            }
            state.pending.removeFirst(written)
        }
    }
}
