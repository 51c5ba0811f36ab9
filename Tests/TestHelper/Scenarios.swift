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
    "names-server": namesServer,
    "names-owner": namesOwner,
    "names-request": namesRequest,
    "names-churn": namesChurn,
    "names-stress": namesStress,
    "names-try": namesTry,
    "names-squat": namesSquat,
    "names-client-cycles": namesClientCycles,
]

/// Prints a line and flushes, so a parent reading a pipe sees it at once.
func say(_ line: String) {
    print(line)
    fflush(nil)  // every output stream
}
