import Glibc

/// A scenario: takes its arguments, returns the exit status.
typealias Scenario = @Sendable ([String]) -> Int32

/// Every scenario by name. Each family of scenarios lives in a file of its own and is
/// listed here.
let scenarios: [String: Scenario] = [
    "loop-descriptor-cycle": loopDescriptorCycle,
    "port-worker": portWorker,
    "port-child-cycles": portChildCycles,
    "port-death-race": portDeathRace,
    "port-connect": portConnect,
    "port-tcp": portTCP,
    "port-tls": portTLS,
    "names-server": namesServer,
    "names-owner": namesOwner,
    "names-echo": namesEcho,
    "names-request": namesRequest,
    "names-churn": namesChurn,
    "names-stress": namesStress,
    "names-try": namesTry,
    "names-squat": namesSquat,
    "names-client-cycles": namesClientCycles,
    "names-activated": namesActivated,
    "cluster-node": clusterNode,
    "tcp-flood": tcpFlood,
    "unix-hello": unixHello,
]

/// Writes a line to standard output at once (one `write`, no buffer), so a parent reading
/// a pipe sees it at once. Not through `print` and a flush of every stream: that takes
/// standard input's lock too, which a thread blocked reading its input holds.
func say(_ line: String) {
    var bytes = Array((line + "\n").utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return }
        bytes = bytes.dropFirst(written)
    }
}
