import Glibc
import NamedPortServer
import PermanentThread
import PortKitLocks

/// `portnamed`'s log: one line per event on the standard error, written whole and never
/// waited for (`LogOutput`), so that neither a stalled log reader nor a client that is
/// refused again and again can stop the server.
///
/// Under systemd (`JOURNAL_STREAM` set) each line starts with its syslog priority
/// (`<4>` … `<7>`), which the journal reads as the entry's level; elsewhere it starts
/// with `portnamed: LEVEL:`.
///
/// Refusals are logged at most `RefusalThrottle.linesPerWindow` times per client process
/// per `RefusalThrottle.window`; the rest are counted, and the count is logged with that
/// process's next refusal after the window.
package struct DaemonLog: Sendable {
    let level: NameServerEvent.Severity
    let toJournal: Bool
    private let output: LogOutput
    private let throttle: RefusalThrottle

    package init(level: NameServerEvent.Severity, output: LogOutput = .standardError) {
        self.level = level
        self.output = output
        throttle = RefusalThrottle()
        toJournal = getenv("JOURNAL_STREAM") != nil
    }

    /// Logs a server event if it is at least as important as the chosen level, and, for a
    /// refusal, if its client is not over its share.
    package func event(_ event: NameServerEvent) {
        guard event.severity <= level else { return }
        switch event {
        case .connectionRefused(let pid, _, _), .requestRefused(let pid, _, _):
            switch throttle.admit(pid: pid) {
            case .log(let suppressedBefore):
                if suppressedBefore > 0 {
                    line(event.severity, "\(suppressedBefore) more refusals of pid \(pid) were not logged")
                }
                line(event.severity, event.description)
            case .suppress:
                return
            }
        default:
            line(event.severity, event.description)
        }
    }

    /// Logs a line of the daemon's own (start, stop, signals).
    package func line(_ severity: NameServerEvent.Severity, _ text: String) {
        guard severity <= level else { return }
        let prefix = toJournal ? "<\(severity.syslogPriority)>" : "portnamed: \(severity): "
        output.write(prefix + text + "\n")
    }

    /// Writes an error line, whatever the level: the daemon cannot go on.
    package func failure(_ text: String) {
        output.write((toJournal ? "<3>\(text)" : "portnamed: \(text)") + "\n")
    }
}

/// How many refusals of one client process are logged: at most `linesPerWindow` per
/// `window`, the rest counted.
final class RefusalThrottle: Sendable {
    /// The refusals of one process logged per window.
    static let linesPerWindow = 10
    /// How long a window lasts.
    static let window: Duration = .seconds(10)
    /// The most processes followed at once; past it, those whose window ended are forgotten.
    static let maxFollowed = 4096

    /// Whether a refusal is logged, and how many of the same process were not since.
    enum Decision: Equatable {
        case log(suppressedBefore: Int)
        case suppress
    }

    private struct Window {
        var start: ContinuousClock.Instant
        var logged = 0
        var suppressed = 0
    }

    private let windows = Locked<[Int32: Window]>([:])

    /// Counts one refusal of process `pid` at `now`.
    func admit(pid: Int32, now: ContinuousClock.Instant = .now) -> Decision {
        windows.withLock { windows in
            if windows.count >= Self.maxFollowed {
                windows = windows.filter { now - $0.value.start < Self.window }
            }
            var window = windows[pid] ?? Window(start: now)
            var suppressedBefore = 0
            if now - window.start >= Self.window {
                suppressedBefore = window.suppressed
                window = Window(start: now)
            }
            defer { windows[pid] = window }
            guard window.logged < Self.linesPerWindow else {
                window.suppressed += 1
                return .suppress
            }
            window.logged += 1
            return .log(suppressedBefore: suppressedBefore)
        }
    }
}
