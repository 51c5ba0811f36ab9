import Glibc
import NamedPortServer
import PortKitSystem

/// What ends the command: an exit status and a line for the standard error.
///
/// The statuses are part of the interface scripts rely on (docs/man/portname.1):
/// 0 success, 1 not found or refused, 2 usage, 3 timed out, 4 the peer died, 5 no server.
struct Exit: Error {
    var status: Int32
    var message: String?

    /// A usage error: the message, then how to get help.
    static func usage(_ message: String, verb: Verb? = nil) -> Exit {
        let help = verb.map { "portname \($0.rawValue) --help" } ?? "portname --help"
        return Exit(status: 2, message: "\(message)\n\(Help.synopsis(verb))\n(see '\(help)')")
    }

    init(status: Int32, message: String?) {
        self.status = status
        self.message = message
    }

    init(_ error: NameServerError) {
        switch error {
        case .notFound, .nameTaken, .nameTakenElsewhere, .notOwner, .permissionDenied, .limitExceeded, .peerRequirementNotMet: status = 1
        case .invalidName: status = 2
        case .waitTimedOut, .transport(.sendTimedOut), .transport(.receiveTimedOut): status = 3
        case .serverUnavailable: status = 5
        case .connectionLost: status = 5
        case .serverAlreadyRunning, .protocolError, .system, .untrustedServer, .serverBusy, .transport, .requirementCannotTravel: status = 1
        case .activationFailed: status = 1
        }
        message = "\(error)"
    }

    init(_ error: PortError, name: String) {
        switch error {
        case .sendTimedOut, .receiveTimedOut:
            self.init(status: 3, message: "timed out waiting for '\(name)'")
        case .peerDied, .invalidPort:
            self.init(status: 4, message: "the owner of '\(name)' died")
        default:
            self.init(status: 1, message: "sending to '\(name)' failed: \(error)")
        }
    }
}

/// Writes a line to the standard output and flushes it, so a reader sees it at once.
func say(_ line: String) {
    print(line)
    fflush(nil)
}

/// Writes `portname: message` to the standard error.
func sayError(_ message: String) {
    let line = "portname: \(message)\n"
    _ = Array(line.utf8).withUnsafeBytes { try? FileDescriptor(rawValue: STDERR_FILENO).writeAll($0) }
}
