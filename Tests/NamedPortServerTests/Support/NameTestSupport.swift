import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitLocks

/// A thread running a loop for the test's receive ports.
final class PortLoop: Sendable {
    let loop: ThreadLoop
    private let done = ConditionLock(false)

    init() {
        let published = ConditionLock<ThreadLoop?>(nil)
        let done = self.done
        let thread = Thread {
            let loop = ThreadLoop.current  // owned thread
            try? loop.add(LoopSource(perform: {}), forMode: .default)
            published.withLock { $0 = loop }
            published.broadcast()
            _ = try? loop.run()
            done.withLock { $0 = true }
            done.broadcast()
        }
        thread.start()
        loop = published.wait(until: nil) { $0 }!
    }

    /// A receive port on this loop answering each request with what `answer` makes of it.
    func port(_ answer: @escaping @Sendable (Message) -> [UInt8] = { $0.bytes }) throws -> ReceivePort {
        let port = ReceivePort()
        try port.schedule(on: loop) { request in Message(id: request.id, components: [.data(answer(request))], replyPort: nil) }
        return port
    }

    /// A receive port on this loop listening at `address`, answering each request with
    /// the reply `answer` makes.
    func port(address: String, _ answer: @escaping @Sendable (Message) -> Message) throws -> ReceivePort {
        let port = ReceivePort()
        try port.listen(at: .path(address))
        try port.schedule(on: loop) { request in answer(request) }
        return port
    }

    deinit {
        loop.stop()
        _ = done.wait(until: .now + .seconds(20)) { $0 ? true : nil }
    }
}

/// Waits until `condition` holds or `timeout` passes; returns whether it held
/// (`eventually`, with the timeout first as these tests write it).
func waitFor(_ timeout: Duration = .seconds(20), _ condition: () throws -> Bool) rethrows -> Bool {
    try eventually(timeout: timeout, condition)
}

/// Sends `text` as a request through `port` and returns the reply's text.
func ask(_ port: SendPort, _ text: String) throws -> String {
    let reply = try port.blockingRequest(
        Message(id: 1, components: [.data(Array(text.utf8))], replyPort: nil),
        sendTimeout: .seconds(30), receiveTimeout: .seconds(30))
    return String(decoding: reply.bytes, as: UTF8.self)
}

/// Whether the tests can run a child as another user: root, with `setpriv`.
let canRunAsNobody: Bool = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
    && getpwnam("nobody") != nil

// MARK: Child processes of the name tests

    /// Starts the `names-server` scenario and waits until it listens.
func startServer(_ directory: TestDirectory, open: Bool = false) throws -> SpawnedProcess {
    let server = try SpawnedProcess.helper("names-server", [directory.address] + (open ? ["--open"] : []))
    #expect(try server.readLine() == "listening on \(directory.address)")
    return server
}

/// Starts an owner of `name` and waits until it serves.
func startOwner(_ address: String, _ name: String, _ options: [String] = []) throws -> SpawnedProcess {
    let owner = try SpawnedProcess.helper("names-owner", [address, name] + options)
    #expect(try owner.readLine() == "serving \(name) \(owner.pid)")
    return owner
}

/// The server child's counts line, e.g. "counts connections=1 names=0 waiting=0 watches=1".
func counts(_ server: SpawnedProcess) throws -> String {
    server.send("counts")
    return try server.readLine()
}

func descriptors(_ server: SpawnedProcess) throws -> Int {
    server.send("fds")
    let line = try server.readLine()
    return try #require(Int(line.dropFirst("fds ".count)), "\(line)")
}
