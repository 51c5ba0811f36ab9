import Foundation

/// Runs the package's test helper as a real child process and collects its output.
package struct ChildProcess {
    /// The helper executable, built beside the test bundle.
    package static var helperPath: String {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = executable.deletingLastPathComponent()
        // The bundle is .build/<config>/PortKitPackageTests.xctest (a file on Linux).
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("portkit-test-helper").path),
              directory.path != "/" {
            directory = directory.deletingLastPathComponent()
        }
        return directory.appendingPathComponent("portkit-test-helper").path
    }

    /// Runs `portkit-test-helper scenario arguments…` to the end; returns (status, stdout).
    package static func run(_ scenario: String, _ arguments: [String] = []) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: helperPath)
        process.arguments = [scenario] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
