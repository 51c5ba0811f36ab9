import PortKitTestSupport
import Testing

/// The docs' snippets compile as part of the build (the `doc-snippets` target, written by
/// scripts/doc-snippets.py); README's, pasted in order into a `main.swift`, also run.
@Suite("The docs' snippets")
struct DocSnippetsTests {
    /// README's snippets as one program: each step prints what its comment says, in order,
    /// and the program ends by itself. Its async request is made from top-level code, where
    /// it must suspend (a blocking form chosen there would block the main thread that the
    /// serving task needs, and time out).
    @Test func readmesProgramRunsToItsEnd() throws {
        let directory = TestDirectory()
        let program = try SpawnedProcess.spawn(
            SpawnedProcess.product("doc-snippets"), [], environment: ["PORTKIT_NAME_SERVER": directory.address])
        let lines = try program.remainingLines(within: .seconds(120)).filter { $0 != "tick" }
        let status = try program.wait(within: .seconds(60))
        #expect(status == .exited(0), "\(program.standardError())")
        #expect(lines == ["flushing", "got ask", "done", "got by name"])
    }
}
