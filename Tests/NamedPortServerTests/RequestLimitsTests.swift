import Glibc
@testable import NamedPortServer
import PermanentThread
import PortKitTestSupport
import PortMessaging
import Testing

/// What a connection may cost the server: a request is refused at its header past the
/// protocol's few KiB, and connections that never say hello, leave a request half sent
/// or (when configured) stay idle are closed after the policy's time-outs.
@Suite("Names: request limits and time-outs")
struct RequestLimitsTests {
    /// The header of a list request announcing a frame of `length` bytes.
    private func header(_ client: RawNameSocket, announcing length: Int) throws -> [UInt8] {
        var bytes = try client.frame(.list, [])
        for index in 0..<4 { bytes[WireLayout.lengthOffset + index] = UInt8(truncatingIfNeeded: length >> (8 * index)) }
        return bytes
    }

    /// 20 connections each announce a 16 MiB request and send 32 KiB of it: each is closed
    /// as soon as its header arrives, and the server goes on answering others.
    @Test func anOversizedRequestIsRefusedAtItsHeader() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let bystander = try NameServerClient.blockingConnect(to: directory.address)
        try bystander.blockingRegister("still.here", port: ReceivePort())

        let body = [UInt8](repeating: 0x41, count: 32 * 1024)
        var clients: [RawNameSocket] = []
        for _ in 0..<20 {
            let client = try RawNameSocket(address: directory.address)
            #expect(try client.hello())
            try client.send(try header(client, announcing: 16 * 1024 * 1024 - 1) + body)
            clients.append(client)
        }
        for (number, client) in clients.enumerated() {
            #expect(try client.isClosedByServer(), "connection \(number) is still open")
            client.close()
        }
        #expect(try waitFor { try server.counts().connections == 1 })
        #expect(try server.counts().bufferedRequestBytes == 0)
        #expect(try bystander.blockingList().map(\.name) == ["still.here"])
        #expect(try NameServerClient.blockingConnect(to: directory.address).blockingOwner(of: "still.here").pid == getpid())
    }

    /// A request of the largest size the protocol allows still goes through, and the
    /// client library refuses a larger one itself, having been told the limit.
    @Test func aRequestAtTheLimitIsServed() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address)
        defer { server.stop() }
        let client = try RawNameClient(address: directory.address)
        defer { client.close() }
        #expect(try client.hello())
        // A name far past the name rules, in a request just at the limit: refused as a name,
        // not as a frame (the connection stays).
        let padding = maxRequestBytes - 8
        let reply = try client.request(.owner, [.data([UInt8](repeating: 0x61, count: padding)), NameField.integer(UInt64(0))])
        #expect(NameReply.decode(status: reply.id, reply.components, address: directory.address)
            == .invalidName(name: String(repeating: "a", count: NameRules.maxNameBytes + 1), reason: .tooLong(bytes: padding)))
        #expect(try client.request(.list, []).id == NameStatus.ok.rawValue)
        #expect(throws: PortError.messageTooLarge(size: maxRequestBytes + 1, limit: maxRequestBytes)) {
            try client.request(.owner, [.data([UInt8](repeating: 0x61, count: padding + 1)), NameField.integer(UInt64(0))])
        }
        #expect(try client.request(.list, []).id == NameStatus.ok.rawValue)
    }

    /// A connection that never says hello is closed after the hello time-out; one that said
    /// hello and holds nothing stays (the idle time-out is off by default).
    @Test func aConnectionThatNeverSaysHelloIsClosed() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(helloTimeout: .seconds(2)))
        defer { server.stop() }
        let greeted = try NameServerClient.blockingConnect(to: directory.address)
        let silent = try RawNameSocket(address: directory.address)
        defer { silent.close() }
        #expect(try silent.isClosedByServer(within: .seconds(60)))
        #expect(try waitFor { try server.counts().connections == 1 })
        #expect(try greeted.blockingList().isEmpty)
    }

    /// A request left half sent is closed after the request time-out, and the bytes kept
    /// for it go with it.
    @Test func aRequestLeftHalfSentIsClosed() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(requestTimeout: .milliseconds(300)))
        defer { server.stop() }
        let client = try RawNameSocket(address: directory.address)
        defer { client.close() }
        #expect(try client.hello())
        let frame = try client.frame(.owner, [.bytes(Array("half".utf8)), .bytes([UInt8](repeating: 0, count: 8))])
        try client.send(Array(frame.prefix(frame.count - 3)))
        #expect(try client.isClosedByServer(within: .seconds(60)))
        #expect(try waitFor { try server.counts() == NameServerCounts(connections: 0, names: 0, waitingLookups: 0, watches: 0) })
    }

    /// With an idle time-out, a connection holding nothing is closed once silent that long;
    /// one holding a name is not.
    @Test func anIdleConnectionIsClosedWhenThePolicySaysSo() throws {
        let directory = TestDirectory()
        let server = try NameServer.start(at: directory.address, policy: NameServerPolicy(idleTimeout: .seconds(1)))
        defer { server.stop() }
        let owner = try NameServerClient.blockingConnect(to: directory.address)
        try owner.blockingRegister("kept", port: ReceivePort())
        let idle = try NameServerClient.blockingConnect(to: directory.address)
        #expect(try idle.blockingList().map(\.name) == ["kept"])  // served, then silent
        #expect(try waitFor(.seconds(60)) { try server.counts().connections == 1 })
        #expect(throws: NameServerError.connectionLost(address: directory.address)) { try idle.blockingList() }
        #expect(try owner.blockingList().map(\.name) == ["kept"])
    }
}
