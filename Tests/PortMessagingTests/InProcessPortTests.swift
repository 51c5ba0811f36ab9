import Dispatch
import Glibc
import PortKitTestSupport
import PermanentThread
import Testing
@testable import PortMessaging
import PortKitSystem
import PortKitLocks

@Suite("Ports between threads of one process")
struct InProcessPortTests {
    @Test(arguments: [0, 1, ReceivePort.defaultMaxMessageBytes])
    func messagesArriveIntact(size: Int) throws {
        let served = ServedPort()
        defer { served.stop() }
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try served.port.makeSendPort().send(Message(id: 7, bytes: bytes), timeout: .seconds(10))
        #expect(eventually { served.received.count == 1 })
        let got = try #require(served.received.all.first)
        #expect(got.id == 7)
        #expect(got.bytes == bytes)
    }

    @Test func overTheLimitIsRefusedAtTheSender() throws {
        let served = ServedPort(ReceivePort(maxMessageBytes: 1000))
        defer { served.stop() }
        #expect(throws: PortError.messageTooLarge(size: 1001, limit: 1000)) {
            try served.port.makeSendPort().send(Message(bytes: [UInt8](repeating: 0, count: 1001)))
        }
        #expect(served.received.count == 0)
    }

    @Test func requestReply() throws {
        let served = ServedPort { Message(id: $0.id + 1, text: "re: " + $0.text) }
        defer { served.stop() }
        let reply = try served.port.makeSendPort().blockingRequest(Message(id: 41, text: "hello"))
        #expect(reply.id == 42)
        #expect(reply.text == "re: hello")
    }

    @Test func asyncRequestReply() async throws {
        let served = ServedPort { Message(id: $0.id, text: $0.text.uppercased()) }
        defer { served.stop() }
        let reply = try await served.port.makeSendPort().request(Message(id: 3, text: "quiet"))
        #expect(reply.text == "QUIET")
    }

    @Test func requestToAPortOnTheCallingThread() throws {
        try withOwnLoop { loop in
            let port = ReceivePort()
            try port.schedule(on: loop) { Message(id: $0.id, text: "same thread") }
            defer { port.invalidate() }
            let reply = try port.makeSendPort().blockingRequest(Message(id: 5), receiveTimeout: .seconds(30))
            #expect(reply.text == "same thread")
        }
    }

    @Test func receiveTimeoutWhenTheHandlerIsSlow() throws {
        let gate = DispatchSemaphore(value: 0)
        let served = ServedPort { _ in gate.wait(); return Message(text: "late") }
        defer { gate.signal(); served.stop() }
        #expect(throws: PortError.receiveTimedOut) {
            try served.port.makeSendPort().blockingRequest(Message(id: 1), receiveTimeout: .milliseconds(100))
        }
    }

    @Test func aSlowReceiverMakesSendersTimeOutAndLosesNothing() throws {
        let gate = DispatchSemaphore(value: 0)
        let served = ServedPort(ReceivePort(capacity: 4)) { message in
            if message.id == 0 { gate.wait() }
            return nil
        }
        let sender = served.port.makeSendPort()
        try sender.send(Message(id: 0), timeout: .seconds(10))  // holds the receiver
        #expect(eventually { served.received.count == 1 })
        var sent: [UInt32] = []
        var timedOut = 0
        for id in UInt32(1)...10 {
            let result = Result { () throws(PortError) in try sender.send(Message(id: id), timeout: .milliseconds(50)) }
            switch result {
            case .success: sent.append(id)
            case .failure(let error):
                #expect(error == .sendTimedOut)
                timedOut += 1
            }
        }
        #expect(sent == [1, 2, 3, 4])
        #expect(timedOut == 6)
        gate.signal()
        #expect(eventually { served.received.count == 5 })
        #expect(served.received.all.map(\.id) == [0, 1, 2, 3, 4])
        served.stop()
    }

    @Test func aMillionMessagesBetweenTwoPermanentThreadsArriveInOrder() throws {
        let count = 1_000_000
        let next = Locked((expected: UInt32(0), inOrder: true))
        let done = DispatchSemaphore(value: 0)
        let receiver = PermanentThread(name: "receiver")
        let sender = PermanentThread(name: "sender")
        try receiver.run()
        try sender.run()
        let port = ReceivePort()
        try port.schedule(on: try #require(receiver.loop)) { message in
            let finished = next.withLock { state -> Bool in
                if message.id != state.expected { state.inOrder = false }
                state.expected += 1
                return state.expected == UInt32(count)
            }
            if finished { done.signal() }
            return nil
        }
        let sendPort = port.makeSendPort()
        let failures = Counter()
        try sender.execute {
            for i in 0..<count {
                if (try? sendPort.send(Message(id: UInt32(i)), timeout: .seconds(60))) == nil { failures.increment() }
            }
        }
        #expect(done.wait(timeout: .now() + .seconds(300)) == .success)
        #expect(failures.count == 0)
        #expect(next.withLock { $0.expected } == UInt32(count))
        #expect(next.withLock { $0.inOrder })
        sender.stop()
        port.invalidate()
        receiver.stop()
    }

    @Test func checkInWithAThreadWorker() throws {
        let boss = ServedPort()
        defer { boss.stop() }
        let bossSend = boss.port.makeSendPort()
        let worker = LoopThread(name: "worker") { loop in
            let port = ReceivePort()
            try! port.schedule(on: loop) { Message(id: $0.id, text: "worker got \($0.text)") }
            try! PortCheckIn.checkIn(to: bossSend, from: port)
            try! bossSend.send(Message(id: 2, text: "hello boss"), timeout: .seconds(10))
            _ = try! loop.run(mode: .default, until: .now + .seconds(120))
        }
        let workerPort = try PortCheckIn.awaitWorker(on: boss.port, timeout: .seconds(30))
        let reply = try workerPort.blockingRequest(Message(id: 1, text: "a job"))
        #expect(reply.text == "worker got a job")
        #expect(eventually { boss.received.all.map(\.text) == ["hello boss"] })
        worker.loop.stop()
        #expect(worker.join())
    }

    @Test func invalidationFailsWaitersAndTellsSendPorts() throws {
        let gate = DispatchSemaphore(value: 0)
        let served = ServedPort { _ in gate.wait(); return nil }
        let sender = served.port.makeSendPort()
        try sender.send(Message(id: 0))
        #expect(eventually { served.received.count == 1 })
        let told = Counter()
        let watcher = LoopThread(name: "watcher") { loop in
            let keep = keepAlive()
            try! loop.add(keep, forMode: .default)
            _ = try! loop.run(mode: .default, until: .now + .seconds(120))
        }
        try sender.onInvalidation(on: watcher.loop) { _ in told.increment() }
        let outcome = Locked<Result<Message, PortError>?>(nil)
        let requester = LoopThread(name: "requester") { _ in
            let result = Result { () throws(PortError) -> Message in try sender.blockingRequest(Message(id: 1), receiveTimeout: .seconds(60)) }
            outcome.withLock { $0 = result }
        }
        #expect(eventually { !served.port.isValid || served.received.count == 1 })
        served.port.invalidate()
        gate.signal()
        #expect(requester.join())
        #expect(throws: PortError.invalidPort) { try outcome.withLock { $0 }?.get() }
        #expect(eventually { told.count == 1 })
        #expect(!sender.isValid)
        #expect(throws: PortError.invalidPort) { try sender.send(Message()) }
        watcher.loop.stop()
        #expect(watcher.join())
        served.stop()
    }

    @Test func descriptorsTravelAsDuplicates() throws {
        let served = ServedPort()
        defer { served.stop() }
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        try served.port.makeSendPort().send(Message(components: [.descriptor(pipe.write.rawValue)]))
        #expect(eventually { served.received.count == 1 })
        let received = try #require(served.received.all.first?.descriptors.first)
        #expect(received != pipe.write.rawValue)
        _ = "x".withCString { write(received, $0, 1) }
        close(received)
        var byte: UInt8 = 0
        _ = try withUnsafeMutableBytes(of: &byte) { try pipe.read.read(into: $0) }
        #expect(byte == UInt8(ascii: "x"))
    }
}

@Suite("Scheduling on a loop that has stopped")
struct StoppedLoopScheduleTests {
    /// A port scheduled on a stopped thread's loop is refused with `.loopEnded`, which says so,
    /// and stays valid and unscheduled: the same port then serves from a running thread.
    @Test func theErrorSaysTheLoopStoppedAndThePortServesElsewhere() throws {
        let stopped = PermanentThread(name: "stopped")
        try stopped.run()
        let stoppedLoop = try #require(stopped.loop)
        stopped.stop()                       // from another thread: returns once it has ended
        let port = ReceivePort()
        defer { port.invalidate() }
        #expect(throws: PortError.loop(.loopEnded)) {
            try port.schedule(on: stoppedLoop) { Message(id: $0.id, text: "never") }
        }
        #expect(PortError.loop(.loopEnded).description.contains("ended"))
        #expect(port.isValid)

        let running = PermanentThread(name: "running")
        try running.run()
        defer { running.stop() }
        try port.schedule(on: try #require(running.loop)) { Message(id: $0.id, text: "served") }
        let reply = try port.makeSendPort().blockingRequest(Message(id: 9), receiveTimeout: .seconds(60))
        #expect(reply.id == 9 && reply.text == "served")
    }
}
