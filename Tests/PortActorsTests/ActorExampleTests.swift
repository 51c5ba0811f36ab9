import PortKitTestSupport
import Testing

/// The `distributed-actors` example runs as documented: two processes, a call by name,
/// one call passing a file descriptor.
@Suite("Distributed actors example")
struct ActorExampleTests {
    @Test func theTwoProcessExampleRuns() throws {
        let example = try SpawnedProcess.spawn(SpawnedProcess.product("distributed-actors"), [])
        let lines = try example.remainingLines(within: .seconds(60))
        #expect(try example.wait() == .exited(0), "\(lines) \(example.standardError())")
        let child = try #require(lines.first?.split(separator: " ").last.map(String.init), "\(lines)")
        #expect(lines == [
            "child: serving librarian \(child)",
            "found librarian@\(child)#1",
            "shelved: 1 book(s)",
            "shelved from a descriptor: Solaris (read on thread 'librarian', pid \(child))",
            "catalogue: Dune, Solaris",
        ])
    }
}
