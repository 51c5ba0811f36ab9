import Glibc
import PortKitTestSupport
import Testing

/// The CFMessagePort-style examples, run as the two programs they are.
@Suite("Examples: a message port server and its client")
struct MessagePortExampleTests {
    private func run(_ name: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        try ChildProcess.run(executable: ChildProcess.productPath(name), arguments)
    }

    @Test func theClientAsksTheServerByNameAndTheServerStopsAfterItsRequests() throws {
        let name = "portkit-example-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let missing = try run("message-port-client", [name])
        #expect(missing.status == 5)
        #expect(missing.output.contains("no port is named \(name)"))

        let server = try SpawnedProcess.spawn(ChildProcess.productPath("message-port-server"), [name, "--requests", "4"])
        // The server says it listens once it does.
        #expect(try server.readLine() == "message-port-server: listening as \(name)")

        let first = try run("message-port-client", [name, "hello there"])
        #expect(first.status == 0)
        #expect(first.output == "\(name) answered: HELLO THERE; requests it has answered: 2\n")
        let second = try run("message-port-client", [name, "again"])
        #expect(second.output == "\(name) answered: AGAIN; requests it has answered: 4\n")
        #expect(try server.remainingOutput() == "message-port-server: answered 4 requests\n")
        #expect(try server.wait() == .exited(0))
    }
}
