import Foundation
import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitLocks

/// A listening port that declares whom it admits: a refused process sees a typed error
/// and never reaches the handler; an admitted one is served.
@Suite("Peer requirements at a listening port")
struct PeerRequirementTests {
    private func freshAddress() -> PortAddress {
        .abstract("portkit-test-requirement-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    }

    /// The request's error, if it fails.
    private func requestError(_ address: PortAddress) throws -> PortError? {
        let port = try SendPort.connect(to: address)
        defer { port.invalidate() }
        do {
            _ = try port.blockingRequest(Message(id: 1, text: "hello"), sendTimeout: .seconds(30), receiveTimeout: .seconds(30))
            return nil
        } catch {
            return error
        }
    }

    @Test func anotherExecutableIsRefusedAndTheNamedOneAdmitted() throws {
        let served = ServedPort { Message(id: $0.id, text: "hi") }
        defer { served.stop() }
        let helper = try #require(realpath(ChildProcess.helperPath, nil).map { path in
            defer { free(path) }
            return String(cString: path)
        })
        let address = freshAddress()
        served.port.requirePeers(.executable(helper))
        try served.port.listen(at: address)

        // The helper child: its executable is the one named, read through its pidfd.
        let (status, output) = try ChildProcess.run("port-connect", ["\(address)"])
        #expect(status == 0, "helper said: \(output)")
        #expect(keyValueFields(output)["reply"] == "hi", "helper said: \(output)")

        // This process runs another executable: refused, with the reason.
        let error = try requestError(address)
        guard case .refusedByPeer(let reason)? = error else {
            Issue.record("expected refusedByPeer, got \(String(describing: error))")
            return
        }
        #expect(reason.contains("is not \(helper)"), "\(reason)")
        #expect(served.received.count == 1, "only the admitted process reached the handler")
    }

    @Test func aGroupTheChildIsNotInRefusesItAndItsOwnAdmitsIt() throws {
        let served = ServedPort { Message(id: $0.id, text: "hi") }
        defer { served.stop() }
        let address = freshAddress()
        served.port.requirePeers(.gids([getgid() &+ 1]))
        try served.port.listen(at: address)
        let (refusedStatus, refusedOutput) = try ChildProcess.run("port-connect", ["\(address)"])
        #expect(refusedStatus == 1, "helper said: \(refusedOutput)")
        #expect(refusedOutput.contains("the listening port refused this process: gid \(getgid())"), "\(refusedOutput)")
        #expect(served.received.count == 0)

        // The requirement is read as each connection is accepted: the next one is admitted.
        served.port.requirePeers(.gids([getgid()]).and(.sameUser))
        let (status, output) = try ChildProcess.run("port-connect", ["\(address)"])
        #expect(status == 0, "helper said: \(output)")
        #expect(served.received.count == 1)
    }

    @Test func aPredicateSeesThePeersCredentialsWithAPidfd() throws {
        let seen = Locked<[pid_t]>([])
        let served = ServedPort { Message(id: $0.id, text: "hi") }
        defer { served.stop() }
        let address = freshAddress()
        served.port.requirePeers(.matching("a peer whose pidfd names it") { credentials in
            guard let pidfd = credentials.pidfd else { return false }
            // A pidfd's fdinfo names the process it refers to.
            let info = (try? String(contentsOfFile: "/proc/self/fdinfo/\(pidfd)", encoding: .utf8)) ?? ""
            seen.withLock { $0.append(credentials.pid) }
            return info.contains("Pid:\t\(credentials.pid)")
        })
        try served.port.listen(at: address)
        #expect(try requestError(address) == nil)
        #expect(seen.withLock { $0 } == [getpid()])
    }
}
