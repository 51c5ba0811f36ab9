// portnamed: the PortKit name server as a daemon. Runs in the foreground, prints
// "listening on PATH" once it accepts connections, and stops cleanly (removing its
// socket file) on SIGTERM or SIGINT.
//
//   portnamed [--address PATH]
//
// The address is PATH, else $PORTKIT_NAME_SERVER, else the per-user default
// ($XDG_RUNTIME_DIR/portkit/names.sock or /tmp/portkit-UID/names.sock). Under systemd
// socket activation (LISTEN_PID/LISTEN_FDS) it serves the socket it is given instead.
// Exit status: 0 after a clean stop, 1 when it cannot start (2 for usage errors).
import Glibc
import NamedPortServer

let usage = "usage: portnamed [--address PATH]"

func fail(_ message: String, status: Int32) -> Never {
    let line = "portnamed: \(message)\n"
    _ = line.utf8CString.withUnsafeBufferPointer { write(STDERR_FILENO, $0.baseAddress, $0.count - 1) }
    exit(status)
}

var address: String?
var arguments = Array(CommandLine.arguments.dropFirst())
while !arguments.isEmpty {
    let argument = arguments.removeFirst()
    switch argument {
    case "--address":
        guard !arguments.isEmpty else { fail("--address needs a path\n\(usage)", status: 2) }
        address = arguments.removeFirst()
    case "-h", "--help":
        print(usage)
        exit(0)
    default:
        fail("unexpected argument '\(argument)'\n\(usage)", status: 2)
    }
}

// SIGTERM and SIGINT are taken by sigwait below, on this thread: block them before any
// other thread exists, so that every thread inherits the mask.
var stopSignals = sigset_t()
sigemptyset(&stopSignals)
sigaddset(&stopSignals, SIGTERM)
sigaddset(&stopSignals, SIGINT)
pthread_sigmask(SIG_BLOCK, &stopSignals, nil)

let server: NameServer
do {
    if let activated = NameServer.socketFromActivation() {
        server = try NameServer.start(adoptingListeningSocket: activated)
    } else {
        server = try NameServer.start(at: address)
    }
} catch {
    fail("\(error)", status: 1)
}

print("listening on \(server.address)")
fflush(nil)

var received: CInt = 0
sigwait(&stopSignals, &received)
server.stop()
exit(0)
