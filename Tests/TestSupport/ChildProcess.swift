import Foundation

/// Runs the package's test helper, or another product built beside it, as a real child
/// process to its end and collects its output.
package struct ChildProcess {
    /// The helper executable, built beside the test bundle.
    package static var helperPath: String { SpawnedProcess.product("portkit-test-helper") }

    /// Runs `portkit-test-helper scenario arguments…` to the end; returns (status, stdout).
    /// `limit` bounds the wait for its output: past it the helper is taken for hung.
    package static func run(
        _ scenario: String, _ arguments: [String] = [], within limit: Duration = .seconds(120)
    ) throws -> (status: Int32, output: String) {
        try run(executable: helperPath, [scenario] + arguments, within: limit)
    }

    /// The path of another product built beside the test helper (an example program).
    package static func productPath(_ name: String) -> String { SpawnedProcess.product(name) }

    /// Runs `executable arguments…` to the end; returns (status, stdout). A child killed by
    /// a signal reports 128 plus the signal's number, as a shell does.
    package static func run(
        executable: String, _ arguments: [String], within limit: Duration = .seconds(120)
    ) throws -> (status: Int32, output: String) {
        let child = try SpawnedProcess.spawn(executable, arguments)
        let output = try child.remainingOutput(within: limit)
        switch try child.wait(within: .seconds(60)) {
        case .exited(let code): return (code, output)
        case .signalled(let signal): return (128 + signal, output)
        }
    }
}
