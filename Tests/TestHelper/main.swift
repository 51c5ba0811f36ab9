// portkit-test-helper: scenarios the tests run in a child process of their own, so that
// process-wide facts (open descriptors, signals, death) are measured without other tests
// running beside them. Usage: portkit-test-helper SCENARIO [ARGS...]; prints results on
// stdout, exits 0 on success, 2 for an unknown scenario.
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
guard let scenario = arguments.first, let run = scenarios[scenario] else {
    let names = scenarios.keys.sorted().joined(separator: ", ")
    let usage = "usage: portkit-test-helper SCENARIO [ARGS...]; scenarios: \(names)\n"
    _ = usage.withCString { write(2, $0, strlen($0)) }
    exit(2)
}
exit(run(Array(arguments.dropFirst())))
