import Glibc
import NamedPortServer
import PermanentThread
import PortKitSystem
import PortKitTestSupport
import PortMessaging
import Testing

/// Real faults arrive as the type and case docs/ARCHITECTURE.md ("Errors") says: the layer
/// where the fault arises names it, and an upper layer carries a lower one whole.
@Suite("Errors arrive as documented")
struct ErrorDesignTests {
    @Test func noNameServerIsServerUnavailable() throws {
        let directory = TestDirectory()
        do {
            _ = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(5))
            Issue.record("connected to a server that does not run")
        } catch {
            guard case .serverUnavailable(let address, _) = error else { throw error }
            #expect(address == directory.address)
        }
    }

    /// A listening socket nobody accepts on: the hello is sent, its answer never comes.
    @Test func aServerThatDoesNotAnswerIsAPortTimeOutCarriedByTransport() throws {
        let directory = TestDirectory()
        let mute = ReceivePort()
        defer { mute.invalidate() }
        try mute.listen(at: .path(directory.address))
        // The client says hello without waiting for the answer; its first call waits for it.
        let client = try NameServerClient.blockingConnect(to: directory.address, timeout: .milliseconds(200))
        #expect(throws: NameServerError.transport(.receiveTimedOut)) { try client.blockingList() }
    }

    @Test func aNameThatDoesNotComeIsTheNameLayersOwnWaitTimedOut() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        #expect(throws: NameServerError.waitTimedOut(operation: "waiting for 'absent'")) {
            try client.blockingLookup("absent", waitingUpTo: .milliseconds(50))
        }
    }

    @Test func aStoppedServerIsAConnectionLost() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        let client = try NameServerClient.blockingConnect(to: directory.address)
        server.stop()
        #expect(throws: NameServerError.connectionLost(address: directory.address)) { try client.blockingList() }
    }

    /// The receiving end is closed; the kernel tells the sender at its next request.
    @Test func aRequestToADeadPeerIsPeerDied() throws {
        let directory = TestDirectory()
        let receiver = ReceivePort()
        try receiver.listen(at: .path(directory.path + "/peer.sock"))
        let loop = PermanentThread(name: "dead-peer")
        try loop.run()
        defer { loop.stop() }
        try receiver.schedule(on: #require(loop.loop)) { Message(id: $0.id, text: "alive") }
        let sender = try SendPort.connect(to: .path(directory.path + "/peer.sock"))
        defer { sender.invalidate() }
        #expect(try sender.blockingRequest(Message(text: "?"), receiveTimeout: .seconds(30)).text == "alive")
        receiver.invalidate()
        #expect(throws: PortError.peerDied) {
            _ = try sender.blockingRequest(Message(text: "?"), sendTimeout: .seconds(30), receiveTimeout: .seconds(30))
        }
    }

    @Test func aSystemCallTheServerMakesIsASystemCallError() throws {
        let long = "/tmp/" + String(repeating: "x", count: UnixSocket.maxPathBytes + 1)
        do {
            let server = try NameServer.start(at: long)
            server.stop()
            Issue.record("a server started at a path longer than a socket's")
        } catch {
            guard case .system(let failure) = error else { throw error }
            #expect(failure.errno == ENAMETOOLONG)
            #expect(failure.description.hasPrefix("bind \(long)"))
        }
    }

    @Test func aStoppedThreadRefusesSyncAsTheThreadsErrorAndABodysErrorKeepsItsType() throws {
        struct Refusal: Error, Equatable { var code: Int }
        let thread = PermanentThread(name: "call-errors")
        try thread.run()
        #expect(throws: ThreadCallError.body(Refusal(code: 1))) {
            try thread.sync { () throws(Refusal) in throw Refusal(code: 1) }
        }
        thread.stop()
        #expect(throws: ThreadCallError<Refusal>.thread(.stopped)) {
            try thread.sync { () throws(Refusal) in throw Refusal(code: 2) }
        }
    }

    @Test func aCancelledNameCallIsTheTransportsCancelled() async throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let client = try await NameServerClient.connect(to: directory.address)
        let waiting = Task { () async -> NameServerError? in
            do throws(NameServerError) {
                _ = try await client.lookup("never", waitingUpTo: .seconds(60))
                return nil
            } catch {
                return error
            }
        }
        waiting.cancel()
        #expect(await waiting.value == .transport(.cancelled))
    }
}
