import Foundation
import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging

/// A receive port bound to a Unix socket address, reached by address from this process
/// and from others (CFMessagePortCreateLocal / CreateRemote).
@Suite("Listening ports")
struct ListeningPortTests {
    /// A fresh address of each kind.
    enum Kind: String, CaseIterable { case path, abstract }

    private func freshAddress(_ kind: Kind, in directory: String) -> PortAddress {
        switch kind {
        case .path: .path(directory + "/port.sock")
        case .abstract: .abstract("portkit-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        }
    }

    private func makeDirectory() -> String {
        let path = NSTemporaryDirectory() + "pkl-\(UInt32.random(in: 0...UInt32.max))"
        mkdir(path, 0o700)
        return path
    }

    @Test(arguments: Kind.allCases)
    func aPeerConnectsByAddressAndTalksBothWays(kind: Kind) throws {
        let directory = makeDirectory()
        let address = freshAddress(kind, in: directory)
        let served = ServedPort { Message(id: $0.id, text: "answer to \($0.text)") }
        defer { served.stop() }
        try served.port.listen(at: address)
        #expect(served.port.listeningAddress == address)
        let port = try SendPort.connect(to: address)
        defer { port.invalidate() }
        #expect(try port.blockingRequest(Message(id: 1, text: "first"), receiveTimeout: .seconds(30)).text == "answer to first")
        try port.send(Message(id: 2, text: "one-way"), timeout: .seconds(10))
        // A second peer is a connection of its own into the same port.
        let other = try SendPort.connect(to: address)
        defer { other.invalidate() }
        #expect(try other.blockingRequest(Message(id: 3, text: "second"), receiveTimeout: .seconds(30)).text == "answer to second")
        #expect(eventually { served.received.count == 3 })
        #expect(Set(served.received.all.map(\.text)) == ["first", "one-way", "second"])
        #expect(served.received.all.allSatisfy { $0.sender?.pid == getpid() })
    }

    /// Another process connects; each side names the other as the sender.
    @Test(arguments: Kind.allCases)
    func anotherProcessConnects(kind: Kind) throws {
        let directory = makeDirectory()
        let address = freshAddress(kind, in: directory)
        let served = ServedPort { Message(id: $0.id, text: "hi \($0.sender?.pid ?? -1)") }
        defer { served.stop() }
        try served.port.listen(at: address)
        let (status, output) = try ChildProcess.run("port-connect", ["\(address)"])
        #expect(status == 0, "helper said: \(output)")
        let fields = keyValueFields(output)
        let child = try #require(fields["pid"].flatMap { Int32($0) }, "helper said: \(output)")
        #expect(fields["reply"] == "hi", "helper said: \(output)")
        #expect(output.contains("reply=hi \(child)"), "the port saw the child as the sender: \(output)")
        #expect(fields["sender"] == "\(getpid())", "the child saw this process as the replier: \(output)")
    }

    @Test func aSocketFileIsMadePrivateAndRemovedWithItsPort() throws {
        let directory = makeDirectory()
        let path = directory + "/port.sock"
        let port = ReceivePort()
        try port.listen(at: .path(path))
        var info = stat()
        #expect(lstat(path, &info) == 0)
        #expect(info.st_mode & S_IFMT == S_IFSOCK)
        #expect(info.st_mode & 0o777 == 0o600)
        port.invalidate()
        #expect(lstat(path, &info) == -1 && errno == ENOENT)
        #expect(throws: PortError.noListener(path)) { try SendPort.connect(to: .path(path)) }
    }

    @Test(arguments: Kind.allCases)
    func aLiveAddressIsRefusedAndAStaleFileReplaced(kind: Kind) throws {
        let directory = makeDirectory()
        let address = freshAddress(kind, in: directory)
        let first = ReceivePort()
        defer { first.invalidate() }
        try first.listen(at: address)
        let second = ReceivePort()
        defer { second.invalidate() }
        #expect(throws: PortError.addressInUse(address.description)) { try second.listen(at: address) }
        #expect(throws: PortError.alreadyListening) { try first.listen(at: address) }
        guard case .path(let path) = address else { return }
        // A socket file left behind with no one listening is stale: replaced.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        first.invalidate()
        var address_un = sockaddr_un()
        address_un.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address_un.sun_path) { raw in
            raw.copyBytes(from: Array(path.utf8) + [0])
        }
        let bound = withUnsafePointer(to: &address_un) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        close(stale)
        let served = ServedPort { Message(id: $0.id, text: "fresh") }
        defer { served.stop() }
        try served.port.listen(at: address)
        #expect(try SendPort.connect(to: address).blockingRequest(Message(id: 1), receiveTimeout: .seconds(30)).text == "fresh")
        // Nothing that is not a socket is ever removed.
        let plain = directory + "/plain"
        #expect(FileManager.default.createFile(atPath: plain, contents: Data("keep".utf8)))
        #expect(throws: PortError.addressInUse(plain)) { try ReceivePort().listen(at: .path(plain)) }
        #expect(FileManager.default.contents(atPath: plain) == Data("keep".utf8))
    }
}
