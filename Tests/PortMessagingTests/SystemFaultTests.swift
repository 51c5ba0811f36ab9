import Foundation
import Glibc
import PermanentThread
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitSystem
import PortKitLocks

/// Faults injected into the System layer's wrapped calls (`FaultSeam`), each armed for one
/// thread only, so the suite runs beside the others: every fault ends in a retry that
/// delivers every message whole, once and in order, or in a typed error, and the port
/// goes on working.
/// It lives with the port tests, not in SystemTests: every case drives the fault through
/// PortMessaging's connections, a layer above System (SystemTests' `FaultSeamTests` checks
/// the seam and the `EINTR` policy alone).
@Suite("System call faults")
struct SystemFaultTests {
    /// What the messages travel over.
    enum Medium: String, CaseIterable { case socket, pipes }

    /// A served port and a send port connected to it over `medium`.
    private func connected(_ medium: Medium) throws -> (ServedPort, SendPort) {
        let served = ServedPort { Message(id: $0.id, text: "re \($0.text)") }
        return (served, try join(served, over: medium))
    }

    /// A new connection into `served` over `medium`, its sending end.
    private func join(_ served: ServedPort, over medium: Medium) throws -> SendPort {
        switch medium {
        case .socket:
            let (theirs, mine) = try Connection.makeSocketPair()
            try served.port.adoptConnection(theirs)
            return SendPort(connection: Connection(.socket(mine)))
        case .pipes:
            let toServed = try FileDescriptor.pipe(nonBlocking: true)
            let toSender = try FileDescriptor.pipe(nonBlocking: true)
            try served.port.adopt(Connection(.pipes(read: toServed.read, write: toSender.write), limits: served.port.limits))
            return SendPort(connection: Connection(.pipes(read: toSender.read, write: toServed.write)))
        }
    }

    /// The call a frame's write makes over `medium` (no descriptors travel).
    private func writeCall(_ medium: Medium) -> SystemCall { medium == .socket ? .send : .write }

    /// The call a frame's read makes over `medium`.
    private func readCall(_ medium: Medium) -> SystemCall { medium == .socket ? .recvmsg : .read }

    /// The fault scope of the served port's loop thread.
    private func loopScope(of served: ServedPort) throws -> FaultSeam.Scope {
        let scope = Locked<FaultSeam.Scope?>(nil)
        try served.thread.loop.perform { scope.withLock { $0 = FaultSeam.currentThread } }
        #expect(eventually { scope.withLock { $0 } != nil })
        return try #require(scope.withLock { $0 })
    }

    /// A message of `count` bytes, numbered `id` (its bytes too, so a mixed-up frame shows).
    private func numbered(_ id: UInt32, count: Int = 1000) -> Message {
        Message(id: id, bytes: (0..<count).map { UInt8(truncatingIfNeeded: Int(id) &+ $0) })
    }

    /// After `ids` were sent one way: a request behind them proves the served port read
    /// everything before it, then exactly those messages, whole and in order, arrived.
    private func expectArrived(_ ids: [UInt32], at served: ServedPort, over sender: SendPort, bytes count: Int = 1000) throws {
        let reply = try sender.blockingRequest(Message(id: 999, text: "last"), receiveTimeout: .seconds(30))
        #expect(reply.text == "re last")
        #expect(served.received.all.map(\.id) == ids + [999])
        for message in served.received.all.dropLast() {
            #expect(message.bytes == numbered(message.id, count: count).bytes)
        }
    }

    @Test(arguments: Medium.allCases)
    func anInterruptedWriteIsMadeAgain(medium: Medium) throws {
        let (served, sender) = try connected(medium)
        defer { sender.invalidate(); served.stop() }
        let (_, fired) = try FaultSeam.injecting(.failure(Errno(rawValue: EINTR)), on: writeCall(medium), times: 3) {
            for id: UInt32 in 1...5 { try sender.send(numbered(id), timeout: .seconds(10)) }
        }
        #expect(fired == 3)
        try expectArrived([1, 2, 3, 4, 5], at: served, over: sender)
    }

    @Test(arguments: Medium.allCases)
    func aWriteThatWouldBlockWaitsForRoomAndGoesOn(medium: Medium) throws {
        let (served, sender) = try connected(medium)
        defer { sender.invalidate(); served.stop() }
        let (_, fired) = try FaultSeam.injecting(.failure(.wouldBlock), on: writeCall(medium), times: 4, skipping: 1) {
            for id: UInt32 in 1...5 { try sender.send(numbered(id), timeout: .seconds(10)) }
        }
        #expect(fired == 4)
        try expectArrived([1, 2, 3, 4, 5], at: served, over: sender)
    }

    @Test(arguments: Medium.allCases)
    func shortWritesMakeWholeFrames(medium: Medium) throws {
        let (served, sender) = try connected(medium)
        defer { sender.invalidate(); served.stop() }
        // Every write of the first frames moves 7 bytes: a 1000-byte message takes many.
        let (_, fired) = try FaultSeam.injecting(.shortWrite(7), on: writeCall(medium), times: 300) {
            for id: UInt32 in 1...3 { try sender.send(numbered(id, count: 1000), timeout: .seconds(10)) }
        }
        #expect(fired == 300)
        try expectArrived([1, 2, 3], at: served, over: sender)
    }

    /// A short `sendmsg`: the descriptor goes with the first bytes, the rest follows.
    @Test func aShortWriteWithADescriptorDeliversBoth() throws {
        let (served, sender) = try connected(.socket)
        defer { sender.invalidate(); served.stop() }
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        var message = numbered(1)
        message.components.append(.descriptor(pipe.write.rawValue))
        let (_, fired) = try FaultSeam.injecting(.shortWrite(5), on: .sendmsg) {
            try sender.send(message, timeout: .seconds(10))
        }
        #expect(fired == 1)
        let reply = try sender.blockingRequest(Message(id: 999, text: "last"), receiveTimeout: .seconds(30))
        #expect(reply.text == "re last")
        #expect(served.received.all.map(\.id) == [1, 999])
        let received = try #require(served.received.all.first)
        #expect(received.bytes == numbered(1).bytes)
        let descriptor = try #require(received.descriptors.first)
        // The descriptor that came is a working copy of the pipe's write end.
        let byte: [UInt8] = [42]
        #expect(try byte.withUnsafeBytes { try FileDescriptor(rawValue: descriptor).write($0) } == 1)
        var got: [UInt8] = [0]
        #expect(try got.withUnsafeMutableBytes { try pipe.read.read(into: $0) } == 1 && got == [42])
        FileDescriptor.close(received.descriptors)
    }

    @Test(arguments: Medium.allCases, [EPIPE, ECONNRESET])
    func aPeerGoneOnWriteIsPeerDied(medium: Medium, error: CInt) throws {
        let (served, sender) = try connected(medium)
        defer { sender.invalidate(); served.stop() }
        try sender.send(numbered(1), timeout: .seconds(10))
        #expect(eventually { served.received.count == 1 })
        let (_, fired) = FaultSeam.injecting(.failure(Errno(rawValue: error)), on: writeCall(medium)) {
            #expect(throws: PortError.peerDied) { try sender.send(numbered(2), timeout: .seconds(10)) }
        }
        #expect(fired == 1)
        // The connection is closed; nothing of the failed frame reached the port.
        #expect(!sender.isValid)
        #expect(throws: PortError.peerDied) { try sender.send(numbered(3), timeout: .seconds(10)) }
        #expect(served.received.all.map(\.id) == [1])
        // The served port goes on with a new connection.
        let other = try join(served, over: medium)
        defer { other.invalidate() }
        #expect(try other.blockingRequest(Message(id: 4, text: "again"), receiveTimeout: .seconds(30)).text == "re again")
        #expect(served.received.all.map(\.id) == [1, 4])
    }

    @Test(arguments: Medium.allCases, [EINTR, EAGAIN])
    func aReadThatIsInterruptedOrFindsNothingIsMadeAgain(medium: Medium, error: CInt) throws {
        let (served, sender) = try connected(medium)
        defer { sender.invalidate(); served.stop() }
        let rule = FaultSeam.arm(.failure(Errno(rawValue: error)), on: readCall(medium), times: 3, scope: try loopScope(of: served))
        for id: UInt32 in 1...5 { try sender.send(numbered(id), timeout: .seconds(10)) }
        #expect(eventually { FaultSeam.fired(rule) == 3 })
        try expectArrived([1, 2, 3, 4, 5], at: served, over: sender)
        #expect(FaultSeam.disarm(rule) == 3)
    }

    /// Out of descriptors while a port travels: the sender gets a typed error, and the
    /// connection carries the next message (and its port) as if nothing had happened.
    @Test func outOfDescriptorsForATravellingPortIsTypedAndTheConnectionGoesOn() throws {
        let (served, sender) = try connected(.socket)
        defer { sender.invalidate(); served.stop() }
        let travelling = ServedPort { Message(id: $0.id, text: "travelled \($0.text)") }
        defer { travelling.stop() }
        let (_, fired) = FaultSeam.injecting(.failure(Errno(rawValue: EMFILE)), on: .socketpair) {
            #expect(throws: PortError.system(operation: "socketpair", errno: EMFILE)) {
                try sender.send(Message(id: 1, text: "with a port", replyPort: travelling.port.makeSendPort()), timeout: .seconds(10))
            }
        }
        #expect(fired == 1)
        try sender.send(Message(id: 2, text: "with a port", replyPort: travelling.port.makeSendPort()), timeout: .seconds(10))
        #expect(sender.isValid)
        #expect(eventually { served.received.count == 1 })
        let arrived = try #require(served.received.all.first)
        #expect(arrived.id == 2)
        // The port that travelled works: a request through it reaches its receive port.
        let port = try #require(arrived.replyPort)
        #expect(try port.blockingRequest(Message(id: 3, text: "hello"), receiveTimeout: .seconds(30)).text == "travelled hello")
        #expect(travelling.received.all.map(\.id) == [3])
        #expect(served.received.all.map(\.id) == [2])
    }

    /// Out of descriptors when a peer connects to a listening port: that peer is refused
    /// (its request fails with `peerDied`, not a hang), the listener keeps listening, and
    /// the next peer is accepted.
    @Test func outOfDescriptorsOnAcceptRefusesOnePeerAndTheListenerGoesOn() throws {
        let served = ServedPort { Message(id: $0.id, text: "re \($0.text)") }
        defer { served.stop() }
        let address = PortAddress.abstract("portkit-fault-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try served.port.listen(at: address)
        let rule = FaultSeam.arm(.failure(Errno(rawValue: EMFILE)), on: .accept, scope: try loopScope(of: served))
        defer { FaultSeam.disarm(rule) }
        let refused = try SendPort.connect(to: address)
        defer { refused.invalidate() }
        #expect(throws: PortError.peerDied) {
            try refused.blockingRequest(Message(id: 1, text: "first"), receiveTimeout: .seconds(30))
        }
        #expect(FaultSeam.fired(rule) == 1)
        let accepted = try SendPort.connect(to: address)
        defer { accepted.invalidate() }
        #expect(try accepted.blockingRequest(Message(id: 2, text: "second"), receiveTimeout: .seconds(30)).text == "re second")
        #expect(served.received.all.map(\.id) == [2])
    }

    /// A pipe's write end as a message's descriptor, and the pipe, to close.
    private func carryingADescriptor(_ id: UInt32) throws -> (Message, (read: FileDescriptor, write: FileDescriptor)) {
        let pipe = try FileDescriptor.pipe()
        var message = Message(id: id, text: "with a descriptor")
        message.components.append(.descriptor(pipe.write.rawValue))
        return (message, pipe)
    }

    /// The receiver out of descriptors (`MSG_CTRUNC`) as a request's descriptor arrives:
    /// the request is refused with a typed error, not delivered, and the connection carries
    /// the next request, descriptor and all.
    @Test func aRequestWhoseDescriptorsTheReceiverCannotTakeIsRefusedAndTheConnectionGoesOn() throws {
        let (served, sender) = try connected(.socket)
        defer { sender.invalidate(); served.stop() }
        let (first, pipe) = try carryingADescriptor(1)
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let rule = FaultSeam.arm(.descriptorsDropped, on: .receivedDescriptors, scope: try loopScope(of: served))
        defer { FaultSeam.disarm(rule) }
        #expect(throws: PortError.receiverOutOfDescriptors) { try sender.blockingRequest(first, receiveTimeout: .seconds(30)) }
        #expect(FaultSeam.fired(rule) == 1)
        #expect(sender.isValid)
        let (second, other) = try carryingADescriptor(2)
        defer { try? other.read.close(); try? other.write.close() }
        #expect(try sender.blockingRequest(second, receiveTimeout: .seconds(30)).text == "re with a descriptor")
        #expect(served.received.all.map(\.id) == [2])
        FileDescriptor.close(served.received.all.flatMap(\.descriptors))
    }

    /// The requester out of descriptors as its reply's descriptor arrives: the request fails
    /// with `EMFILE`, and the next one gets its reply, descriptor and all.
    @Test func aReplyWhoseDescriptorsTheRequesterCannotTakeFailsItsRequestOnly() throws {
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let served = ServedPort { request in
            var reply = Message(id: request.id, text: "re \(request.text)")
            reply.components.append(.descriptor(pipe.write.rawValue))
            return reply
        }
        let sender = try join(served, over: .socket)
        defer { sender.invalidate(); served.stop() }
        let (_, fired) = FaultSeam.injecting(.descriptorsDropped, on: .receivedDescriptors) {
            #expect(throws: PortError.system(operation: "recvmsg (a reply's descriptors)", errno: EMFILE)) {
                try sender.blockingRequest(Message(id: 1, text: "first"), receiveTimeout: .seconds(30))
            }
        }
        #expect(fired == 1)
        #expect(sender.isValid)
        let reply = try sender.blockingRequest(Message(id: 2, text: "second"), receiveTimeout: .seconds(30))
        #expect(reply.text == "re second" && reply.descriptors.count == 1)
        FileDescriptor.close(reply.descriptors)
        #expect(served.received.all.map(\.id) == [1, 2])
    }
}
