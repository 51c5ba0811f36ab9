import Foundation
import Testing

/// No test runs the loop of a thread it does not own (see `withOwnLoop` in PortKitTestSupport):
/// this scans the test targets' sources (every `Tests/*Tests` folder) for the calls that make
/// or take the calling thread's loop. Such a call is allowed only on a line marked
/// `// owned thread`, for code that runs on a thread the test made; a test's own body takes
/// its loop from `withOwnLoop`, a `LoopThread` or a `PermanentThread`.
@Suite("Tests own the threads of the loops they run")
struct TestsOwnTheirLoopsTests {
    /// The calls that reach the calling thread's loop (spelled in two pieces, so this file
    /// does not match itself).
    static let calls = ["ThreadLoop" + ".current", "ThreadLoop" + ".forCurrentThread"]
    static let marker = "// owned thread"

    /// The `Tests` folder of this checkout.
    static var testsFolder: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    }

    /// The lines of `text` (numbered from 1) that reach the calling thread's loop unmarked.
    static func unmarkedLines(in text: String) -> [Int] {
        text.split(separator: "\n", omittingEmptySubsequences: false).enumerated().compactMap { index, line in
            calls.contains(where: line.contains) && !line.contains(marker) ? index + 1 : nil
        }
    }

    @Test func theRuleFindsAnUnmarkedUseAndLetsAMarkedOnePass() {
        let text = """
            let a = 1
            let loop = \(Self.calls[0])
            let other = \(Self.calls[0])  \(Self.marker)
            _ = try \(Self.calls[1])()
            """
        #expect(Self.unmarkedLines(in: text) == [2, 4])
    }

    @Test func noTestTakesTheLoopOfAThreadItDoesNotOwn() throws {
        let files = FileManager.default
        let targets = try files.contentsOfDirectory(atPath: Self.testsFolder.path).filter { $0.hasSuffix("Tests") }
        var scanned = 0
        var offending: [String] = []
        for target in targets {
            let folder = Self.testsFolder.appendingPathComponent(target)
            let paths = files.enumerator(atPath: folder.path)?.compactMap { $0 as? String } ?? []
            for path in paths where path.hasSuffix(".swift") {
                let text = try String(contentsOf: folder.appendingPathComponent(path), encoding: .utf8)
                scanned += 1
                offending += Self.unmarkedLines(in: text).map { "Tests/\(target)/\(path):\($0)" }
            }
        }
        // The sources were found (a wrong folder would pass vacuously).
        #expect(targets.contains("PermanentThreadTests") && scanned > 50)
        #expect(offending == [], "run the test's loop on a thread it owns: withOwnLoop { loop in … }")
    }
}
