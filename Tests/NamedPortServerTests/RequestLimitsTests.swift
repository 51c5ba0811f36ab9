import Glibc
@testable import NamedPortServer
import PermanentThread
import PortMessaging
import Testing

/// What a connection may cost the server: a request frame is refused at its header past
/// the protocol's few KiB, and connections that never say hello, leave a request half sent
/// or (when configured) stay idle are closed after the policy's time-outs.
@Suite("Names: request limits and time-outs")
struct RequestLimitsTests {
    /// The header of a list request announcing a frame of `length` bytes.
    private func header(announcing length: Int) throws -> [UInt8] {
        var bytes = try WireMessage(kind: .request, id: NameOperation.list.rawValue, sequence: 1, components: []).frame().bytes
        for index in 0..<4 { bytes[WireLayout.lengthOffset + index] = UInt8(truncatingIfNeeded: length >> (8 * index)) }
        return bytes
    }

    /// 20 connections each announce a 16 MiB request and send 32 KiB of it: each is closed
    /// as soon as its header arrives, the server never holds more than a frame's limit for
    /// any of them, and it goes on answering others.
    @Test func anOversizedRequestIsRefusedAtItsHeader() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let bystander = try NameServerClient.connect(to: directory.address)
        try bystander.register("still.here", port: ReceivePort())

        let body = [UInt8](repeating: 0x41, count: 32 * 1024)
        let oversized = try header(announcing: 16 * 1024 * 1024 - 1) + body
        var clients: [RawNameClient] = []
        for _ in 0..<20 {
            let client = try RawNameClient(address: directory.address)
            #expect(try client.hello())
            try client.send(oversized)
            clients.append(client)
        }
        for (number, client) in clients.enumerated() {
            #expect(try client.isClosedByServer(), "connection \(number) is still open")
            client.close()
        }
        #expect(try server.peakBufferedRequestBytes() <= requestLimits.maxFrameBytes)
        #expect(try waitFor { try server.counts().connections == 1 })
        #expect(try server.counts().bufferedRequestBytes == 0)
        #expect(try bystander.list().map(\.name) == ["still.here"])
        #expect(try NameServerClient.connect(to: directory.address).owner(of: "still.here").pid == getpid())
    }

    /// A request of the largest size the protocol allows still goes through.
    @Test func aRequestAtTheLimitIsServed() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let client = try RawNameClient(address: directory.address)
        defer { client.close() }
        #expect(try client.hello())
        // A name far past the name rules, in a frame just at the limit: refused as a name,
        // not as a frame (the connection stays).
        let padding = requestLimits.maxFrameBytes - WireLayout.headerSize - 2 * 5 - 8
        let reply = try client.request(.owner, [.bytes([UInt8](repeating: 0x61, count: padding)), NameField.integer(UInt64(0))])
        #expect(NameReply.decode(status: reply.message.id, reply.message.components, address: directory.address)
            == .invalidName(name: String(repeating: "a", count: NameRules.maxNameBytes + 1), reason: .tooLong(bytes: padding)))
        #expect(try client.request(.list, []).message.id == NameStatus.ok.rawValue)
    }

    /// A connection that never says hello is closed after the hello time-out; one that said
    /// hello and holds nothing stays (the idle time-out is off by default).
    @Test func aConnectionThatNeverSaysHelloIsClosed() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(helloTimeout: .seconds(2)))
        defer { server.stop() }
        let greeted = try NameServerClient.connect(to: directory.address)
        let silent = try RawNameClient(address: directory.address)
        defer { silent.close() }
        #expect(try silent.isClosedByServer(within: .seconds(60)))
        #expect(try waitFor { try server.counts().connections == 1 })
        #expect(try greeted.list().isEmpty)
    }

    /// A request left half sent is closed after the request time-out, and the bytes kept
    /// for it go with it.
    @Test func aRequestLeftHalfSentIsClosed() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(requestTimeout: .milliseconds(300)))
        defer { server.stop() }
        let client = try RawNameClient(address: directory.address)
        defer { client.close() }
        #expect(try client.hello())
        let frame = try WireMessage(
            kind: .request, id: NameOperation.owner.rawValue, sequence: 2, components: [NameField.string("half"), NameField.integer(0)]
        ).frame().bytes
        try client.send(Array(frame.prefix(frame.count - 3)))
        #expect(try client.isClosedByServer(within: .seconds(60)))
        // The part was held until then (the peak is kept, so no race with the close).
        #expect(try server.peakBufferedRequestBytes() == frame.count - 3)
        #expect(try waitFor { try server.counts() == NameServerCounts(connections: 0, names: 0, waitingLookups: 0, watches: 0) })
    }

    /// With an idle time-out, a connection holding nothing is closed once silent that long;
    /// one holding a name is not.
    @Test func anIdleConnectionIsClosedWhenThePolicySaysSo() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(idleTimeout: .milliseconds(300)))
        defer { server.stop() }
        // The owner's hello and register go in one write, so they are served in one pass:
        // no moment where it holds nothing after its hello.
        let owner = try RawNameClient(address: directory.address)
        defer { owner.close() }
        let hello = try WireMessage(
            kind: .request, id: NameOperation.hello.rawValue, sequence: 1, components: [NameField.integer(1)]).frame()
        let register = try WireMessage(
            kind: .request, id: NameOperation.register.rawValue, sequence: 2, components: [NameField.string("kept")]).frame()
        try owner.send(hello.bytes + register.bytes)
        #expect(try owner.next().message.id == NameStatus.ok.rawValue)
        #expect(try owner.next().message.id == NameStatus.ok.rawValue)
        let idle = try NameServerClient.connect(to: directory.address)
        #expect(try waitFor(.seconds(60)) { try server.counts().connections == 1 })
        #expect(throws: NameServerError.connectionLost(address: directory.address)) { try idle.list() }
        #expect(try owner.request(.list, []).message.components.count == 3)
    }
}
