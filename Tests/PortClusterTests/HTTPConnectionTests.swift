import Foundation
import Dispatch
import Glibc
import PermanentThread
@testable import PortCluster
import PortKitTestSupport
import Testing
import PortKitSystem

/// The HTTP/1.1 client against a scripted server: answers cut at awkward places.
@Suite("Cluster: HTTP/1.1 answers read in pieces")
struct HTTPConnectionTests {
    /// A one-connection server on loopback that reads one request, then writes `parts`,
    /// waiting for `go` before each part after the first.
    private final class ScriptedServer: @unchecked Sendable {
        // Safety of @unchecked Sendable: `listener` and `port` are set in init and only
        // read after; the semaphore is thread-safe.
        let listener: FileDescriptor
        let port: UInt16
        let go = DispatchSemaphore(value: 0)

        init(parts: [String]) throws {
            let address = try TCPSocket.resolve("127.0.0.1", port: 0).first!
            (listener, port) = try TCPSocket.listen(at: address)
            let listener = self.listener
            DispatchQueue.global().async { [go] in
                guard try! listener.poll(CShort(POLLIN), timeout: .seconds(60)) != 0,
                      let socket = try! TCPSocket.accept(listener) else { return }
                defer { try? socket.close() }
                var request: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !Self.isWhole(request) {
                    _ = try? socket.poll(CShort(POLLIN), timeout: .seconds(60))
                    let count = (try? buffer.withUnsafeMutableBytes { try socket.read(into: $0) }) ?? 0
                    if count <= 0 { return }
                    request += buffer[..<count]
                }
                for (index, part) in parts.enumerated() {
                    if index > 0 { go.wait() }
                    _ = Array(part.utf8).withUnsafeBytes { try? socket.send($0) }
                }
            }
        }

        deinit { try? listener.close() }

        /// Whether `request` holds a head and as many body bytes as its Content-Length says.
        private static func isWhole(_ request: [UInt8]) -> Bool {
            let text = String(decoding: request, as: UTF8.self)
            guard let end = text.range(of: "\r\n\r\n") else { return false }
            let length = text[..<end.lowerBound].split(separator: "\r\n")
                .first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            return text[end.upperBound...].utf8.count >= length
        }
    }

    /// One HTTP chunk holding `text` and a newline, as etcd streams a watch's messages.
    private static func chunk(_ text: String) -> String {
        String(text.utf8.count + 1, radix: 16) + "\r\n" + text + "\n\r\n"
    }

    /// A watch message with one put of `key` at `revision`.
    private static func put(_ key: String, revision: Int) -> String {
        #"{"result":{"events":[{"kv":{"key":"\#(EtcdClient.base64(key))","value":"","create_revision":"\#(revision)","mod_revision":"\#(revision)"}}]}}"#
    }

    /// Two changes that arrive in one read are both returned by one `next`: a node waits for
    /// the socket to be readable before it asks again, and nothing would wake it for the
    /// second left in the connection's buffer.
    @Test func aWatchReturnsEveryChangeOneReadBrought() throws {
        let server = try ScriptedServer(parts: [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + Self.chunk(#"{"result":{"created":true}}"#),
            Self.chunk(Self.put("names/a", revision: 5)) + Self.chunk(Self.put("names/b", revision: 6)),
        ])
        let client = try EtcdClient(endpoint: "http://127.0.0.1:\(server.port)", timeout: .seconds(30))
        let watch = try client.watch(prefix: "names/", fromRevision: 5)
        defer { watch.cancel() }
        server.go.signal()  // both changes in one send, once the watch is created
        let descriptor = try #require(watch.descriptor)
        #expect(try FileDescriptor(rawValue: descriptor).poll(CShort(POLLIN), timeout: .seconds(30)) != 0)
        #expect(try watch.next(timeout: .zero).map(\.key) == ["names/a", "names/b"])
    }

    @Test func aStreamCutInsideItsChunksYieldsWholeMessagesInOrder() throws {
        let server = try ScriptedServer(parts: [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + "10\r\n{\"a\":1}\n{\"b\"",
            ":2}\n\r\n",  // the rest of the first chunk
            "8\r\n{\"c\":",  // half a chunk
            "3}\n\r\n0\r\n\r\n",
        ])
        let http = HTTPConnection(host: "127.0.0.1", port: server.port)
        #expect(try http.startStream("/v3/watch", body: Array("{}".utf8), deadline: .now + .seconds(30)) == 200)
        var messages: [String] = []
        var timeouts = 0
        let deadline = ContinuousClock.now + .seconds(60)
        while messages.count < 3, ContinuousClock.now < deadline {
            if let message = try http.nextMessage(deadline: .now + .milliseconds(100)) {
                messages.append(String(decoding: message, as: UTF8.self))
            } else {
                // Nothing whole came in time: the server may send its next part.
                timeouts += 1
                server.go.signal()
            }
        }
        #expect(messages == ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"])
        #expect(timeouts >= 2)  // two waits ended inside a chunk, and lost nothing
        #expect {
            _ = try http.nextMessage(deadline: .now + .seconds(30))
        } throws: { error in
            if case HTTPFailure.broken = error { true } else { false }
        }
    }

    @Test func anAnswerWithALengthIsReadWholeAndAMalformedOneIsRefused() throws {
        let server = try ScriptedServer(parts: ["HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"])
        let http = HTTPConnection(host: "127.0.0.1", port: server.port)
        let response = try http.post("/v3/kv/range", body: Array("{}".utf8), deadline: .now + .seconds(30))
        #expect(response.status == 200)
        #expect(String(decoding: response.body, as: UTF8.self) == "{\"ok\":true}")

        let bad = try ScriptedServer(parts: ["SMTP ready\r\n\r\n"])
        let other = HTTPConnection(host: "127.0.0.1", port: bad.port)
        #expect {
            _ = try other.post("/v3/kv/range", body: Array("{}".utf8), deadline: .now + .seconds(30))
        } throws: { error in
            if case HTTPFailure.malformed = error { true } else { false }
        }
    }

    /// Driven from a loop, an exchange whose server goes silent part way ends at its
    /// deadline, and the loop goes on with its other work meanwhile; an answered one
    /// completes on the loop.
    @Test func aLoopDrivenExchangeEndsAtItsDeadlineWithoutHoldingTheLoop() throws {
        let silent = try ScriptedServer(parts: ["HTTP/1.1 200 OK\r\n", "Content-Length: 2\r\n\r\n{}"])
        defer { silent.go.signal() }
        let answering = try ScriptedServer(parts: ["HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"])
        let thread = PermanentThread(name: "test.http-loop")
        try thread.run()
        defer { thread.stop() }
        let outcomes = Recorder<String>()
        let started = ContinuousClock.now
        try thread.execute {
            for (server, timeout) in [(silent, Duration.milliseconds(300)), (answering, .seconds(30))] {
                let driver = HTTPLoopDriver(host: "127.0.0.1", port: server.port, security: nil, loop: thread.loop!, timeout: timeout)
                driver.send("/v3/kv/range", body: Array("{}".utf8)) { result in
                    withExtendedLifetime(driver) {}
                    switch result {
                    case .success(let response): outcomes.append("\(response.status) " + String(decoding: response.body, as: UTF8.self))
                    case .failure(let failure): outcomes.append("\(failure)")
                    }
                }
            }
        }
        var slowest = Duration.zero
        while outcomes.count < 2, ContinuousClock.now - started < .seconds(30) {
            let pass = ContinuousClock.now
            try thread.sync {}
            slowest = max(slowest, .now - pass)
            usleep(5_000)  // paces the probes; it synchronises nothing
        }
        #expect(outcomes.all.sorted() == ["200 {\"ok\":true}", "\(HTTPFailure.timedOut)"])
        #expect(ContinuousClock.now - started >= .milliseconds(300))
        #expect(slowest < .milliseconds(200), "a loop pass took \(slowest) while an exchange waited")
    }
}
