import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing
import PortKitLocks

/// A port registered under several names through one client is one connection at the
/// server (the names after the first name the first: `registerSame`), which the server
/// keeps while any of its names is held, and whose death releases every one of them.
@Suite("Names: one port under several names", .serialized)
struct SharedPortNamesTests {
    @Test func aPortUnderManyNamesIsOneConnectionAtTheServerUntilItsLastNameGoes() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(30))
        defer { owner.close() }
        let loop = PortLoop()
        let port = try loop.port { Array("served \(String(decoding: $0.bytes, as: UTF8.self))".utf8) }
        defer { port.invalidate() }
        let client = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(30))
        defer { client.close() }
        #expect(try owner.blockingList().isEmpty && client.blockingList().isEmpty)
        let base = try descriptors(server)

        // The first name brings the port: a connection and its hang-up watch at the server.
        try owner.blockingRegister("shared.0", port: port)
        #expect(try descriptors(server) == base + 2)
        for index in 1..<200 { try owner.blockingRegister("shared.\(index)", port: port) }
        #expect(try descriptors(server) == base + 2)
        #expect(try counts(server).contains("names=200"))

        for name in ["shared.0", "shared.123", "shared.199"] {
            let reached = try client.blockingLookup(name)
            #expect(try ask(reached, name) == "served \(name)")
            reached.invalidate()
        }

        // Released one by one, the names leave the connection up for the last.
        for index in 0..<199 { try owner.blockingUnregister("shared.\(index)") }
        #expect(try descriptors(server) == base + 2)
        let last = try client.blockingLookup("shared.199")
        #expect(try ask(last, "still") == "served still")
        last.invalidate()
        try owner.blockingUnregister("shared.199")
        #expect(try waitFor { try descriptors(server) == base }, "server descriptors: base \(base)")
        #expect(try client.blockingList().isEmpty)

        // Registered again, the port is sent again.
        try owner.blockingRegister("shared.again", port: port)
        let again = try client.blockingLookup("shared.again")
        #expect(try ask(again, "x") == "served x")
        again.invalidate()
    }

    @Test func aPortsDeathReleasesEveryNameItHadInNameOrderAndNoOther() throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(30))
        defer { owner.close() }
        let loop = PortLoop()
        let doomed = try loop.port()
        let kept = try loop.port()
        defer { kept.invalidate() }
        for name in ["svc.c", "svc.a", "svc.b"] { try owner.blockingRegister(name, port: doomed) }
        try owner.blockingRegister("svc.kept", port: kept)

        let watcher = try NameServerClient.blockingConnect(to: directory.address, timeout: .seconds(30))
        defer { watcher.close() }
        let watch = try watcher.blockingWatch(prefix: "svc.")
        #expect(watch.initialOwners.map(\.name) == ["svc.a", "svc.b", "svc.c", "svc.kept"])
        doomed.invalidate()
        var vanished: [String] = []
        while vanished.count < 3, let event = try watch.next(timeout: .seconds(30)) {
            guard case .vanished(let gone) = event else {
                Issue.record("unexpected \(event)")
                break
            }
            vanished.append(gone.name)
        }
        #expect(vanished == ["svc.a", "svc.b", "svc.c"])
        #expect(try watcher.blockingList().map(\.name) == ["svc.kept"])
        // The owner's connection holds the kept name still, and takes the others again.
        try owner.blockingRegister("svc.a", port: kept)
        #expect(try watcher.blockingList().map(\.name) == ["svc.a", "svc.kept"])
    }

    @Test func anAsyncRegisterNamesAHeldNameToo() async throws {
        let directory = TestDirectory()
        let server = try startServer(directory)
        defer { server.kill() }
        let owner = try await NameServerClient.connect(to: directory.address, timeout: .seconds(30))
        defer { owner.close() }
        let loop = PortLoop()
        let port = try loop.port()
        defer { port.invalidate() }
        try await owner.register("async.a", port: port)
        let held = try descriptors(server)
        try await owner.register("async.b", port: port)
        #expect(try descriptors(server) == held)
        #expect(try await owner.list().map(\.name) == ["async.a", "async.b"])
    }

    /// A server that predates `registerSame` (played by the test: it answers hello and
    /// register, and refuses anything else as an unknown operation) is sent the port again.
    @Test func aServerThatPredatesRegisterSameIsSentThePortAgain() throws {
        let directory = TestDirectory()
        let loop = PortLoop()
        let requests = Locked<[String]>([])
        let server = try loop.port(address: directory.address) { message in
            let ports = message.components.filter { if case .port = $0 { true } else { false } }.count
            requests.withLock { $0.append("\(message.id):\(ports)") }
            message.discardAttachments()
            switch NameOperation(rawValue: message.id) {
            case .hello?:
                return Message(id: NameStatus.ok.rawValue, components: [
                    NameField.integer(getpid()), NameField.integer(UInt32(getuid())), NameField.integer(nameProtocolVersion),
                ])
            case .register?:
                return Message(id: NameStatus.ok.rawValue, components: [])
            default:
                return NameReply.encode(.protocolError("unknown operation \(message.id)"))
            }
        }
        defer { server.invalidate() }
        let client = try NameServerClient.blockingConnect(to: directory.address)
        defer { client.close() }
        let port = ReceivePort()
        defer { port.invalidate() }
        let first = try client.blockingRegister("a", port: port)
        let second = try client.blockingRegister("b", port: port)
        #expect(first.state == .registered && second.state == .registered)
        let (hello, register, same) = (NameOperation.hello.rawValue, NameOperation.register.rawValue, NameOperation.registerSame.rawValue)
        #expect(requests.withLock { $0 } == ["\(hello):0", "\(register):1", "\(same):0", "\(register):1"])
    }
}
