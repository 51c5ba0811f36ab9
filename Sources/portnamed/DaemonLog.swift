import Glibc
import NamedPortServer

/// `portnamed`'s log: one line per event on the standard error, written with one
/// `write` so lines from the server's thread and the main thread never interleave.
///
/// Under systemd (`JOURNAL_STREAM` set) each line starts with its syslog priority
/// (`<4>` … `<7>`), which the journal reads as the entry's level; elsewhere it starts
/// with `portnamed: LEVEL:`.
struct DaemonLog: Sendable {
    let level: NameServerEvent.Severity
    let toJournal: Bool

    init(level: NameServerEvent.Severity) {
        self.level = level
        toJournal = getenv("JOURNAL_STREAM") != nil
    }

    /// Logs a server event if it is at least as important as the chosen level.
    func event(_ event: NameServerEvent) {
        line(event.severity, event.description)
    }

    /// Logs a line of the daemon's own (start, stop, signals).
    func line(_ severity: NameServerEvent.Severity, _ text: String) {
        guard severity <= level else { return }
        let prefix = toJournal ? "<\(severity.syslogPriority)>" : "portnamed: \(severity): "
        write(prefix + text)
    }

    /// Writes an error line, whatever the level: the daemon cannot go on.
    func failure(_ text: String) {
        write(toJournal ? "<3>\(text)" : "portnamed: \(text)")
    }

    private func write(_ text: String) {
        let line = text + "\n"
        _ = line.utf8CString.withUnsafeBufferPointer { Glibc.write(STDERR_FILENO, $0.baseAddress, $0.count - 1) }
    }
}
