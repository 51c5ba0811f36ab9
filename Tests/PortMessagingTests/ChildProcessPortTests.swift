import Foundation
import Dispatch
import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitSystem
import PortKitLocks

@Suite("Ports between processes")
struct ChildProcessPortTests {
    @Test(arguments: [ChildWorker.Channel.socket, .pipes])
    func checkInWithAChildThenMessagesBothWays(channel: ChildWorker.Channel) throws {
        let child = try WorkerChild(channel: channel)
        defer { child.finish() }
        let reply = try child.worker.blockingRequest(Message(id: WorkerOp.echo, text: "ping"), receiveTimeout: .seconds(30))
        #expect(reply.text == "ping")
        try child.worker.send(Message(id: WorkerOp.sendBack), timeout: .seconds(10))
        #expect(eventually { child.boss.received.all.contains { $0.text == "one-way from the child" } })
    }

    @Test func requestReplyTimeoutsWithAChild() throws {
        let child = try WorkerChild()
        defer { child.finish() }
        #expect(throws: PortError.receiveTimedOut) {
            try child.worker.blockingRequest(Message(id: WorkerOp.sleepThenReply, text: "800"), receiveTimeout: .milliseconds(100))
        }
        // The late reply is discarded; the next request gets its own reply.
        let reply = try child.worker.blockingRequest(Message(id: WorkerOp.echo, text: "after"), receiveTimeout: .seconds(30))
        #expect(reply.text == "after")
    }

    /// A request made on the thread whose loop reads its connection first waits on the socket
    /// alone (a read with a receive timeout of a few milliseconds), then runs the loop: a
    /// reply slower than that still arrives, and the loop's timers fire meanwhile.
    @Test(arguments: [ChildWorker.Channel.socket, .pipes])
    func aSlowReplyOnTheLoopThreadLetsTheLoopServeItsTimers(channel: ChildWorker.Channel) throws {
        let child = try WorkerChild(channel: channel)
        defer { child.finish() }
        let loop = child.boss.thread.loop
        let outcome = Locked<(reply: String?, ticksWhileWaiting: Int)?>(nil)
        let worker = child.worker
        try loop.perform {
            let ticks = Counter()
            let timer = LoopTimer(after: .milliseconds(10), repeating: .milliseconds(10)) { _ in ticks.increment() }
            try? loop.add(timer, forMode: .common)
            let reply = try? worker.blockingRequest(Message(id: WorkerOp.sleepThenReply, text: "400"), receiveTimeout: .seconds(60))
            timer.invalidate()
            outcome.withLock { $0 = (reply?.text, ticks.count) }
        }
        #expect(eventually(timeout: .seconds(60)) { outcome.withLock { $0 != nil } })
        let result = try #require(outcome.withLock { $0 })
        #expect(result.reply == "slept")
        // 400 ms at one tick per 10 ms: about 40; a handful proves the loop ran.
        #expect(result.ticksWhileWaiting >= 5)
        // And the connection still serves the quick path afterwards.
        let again = try worker.blockingRequest(Message(id: WorkerOp.echo, text: "after"), receiveTimeout: .seconds(30))
        #expect(again.text == "after")
    }

    @Test(arguments: [0, 1, ReceivePort.defaultMaxMessageBytes])
    func sizesRoundTripThroughAChild(size: Int) throws {
        let child = try WorkerChild()
        defer { child.finish() }
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let reply = try child.worker.blockingRequest(Message(id: WorkerOp.echo, bytes: bytes), receiveTimeout: .seconds(60))
        #expect(reply.bytes == bytes)
    }

    @Test func overTheLimitIsRefusedAtTheSender() throws {
        let child = try WorkerChild()
        defer { child.finish() }
        let tooBig = [UInt8](repeating: 1, count: ReceivePort.defaultMaxMessageBytes + 1)
        #expect(throws: PortError.messageTooLarge(size: tooBig.count, limit: ReceivePort.defaultMaxMessageBytes)) {
            try child.worker.send(Message(id: WorkerOp.echo, bytes: tooBig))
        }
        // The connection is intact.
        #expect(try child.worker.blockingRequest(Message(id: WorkerOp.echo, text: "still here")).text == "still here")
    }

    @Test func aHundredThousandMessagesToAChildArriveInOrder() throws {
        let child = try WorkerChild()
        defer { child.finish() }
        for i in 0..<100_000 { try child.worker.send(streamMessage(UInt64(i)), timeout: .seconds(30)) }
        let report = try child.worker.blockingRequest(Message(id: WorkerOp.streamReport), receiveTimeout: .seconds(60))
        #expect(report.text == "100000 true")
    }

    @Test func aBurstOfBackToBackMessagesArrivesComplete() throws {
        let child = try WorkerChild()
        defer { child.finish() }
        let senders = 4, each = 2_500
        DispatchQueue.concurrentPerform(iterations: senders) { _ in
            for _ in 0..<each { try! child.worker.send(Message(id: WorkerOp.sendBack), timeout: .seconds(30)) }
        }
        #expect(eventually(timeout: .seconds(60)) { child.boss.received.count == senders * each })
    }

    @Test func aDescriptorTravelsToAChild() throws {
        let child = try WorkerChild()
        defer { child.finish() }
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close() }
        let reply = try child.worker.blockingRequest(Message(id: WorkerOp.writeToDescriptor, components: [.descriptor(pipe.write.rawValue)]))
        try pipe.write.close()
        #expect(reply.text == "wrote 1")
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = try buffer.withUnsafeMutableBytes { try pipe.read.read(into: $0) }
        #expect(String(decoding: buffer.prefix(n), as: UTF8.self) == "written by the child")
    }

    @Test func aPortHandedToAChildIsUsedDirectly() throws {
        let child = try WorkerChild()
        defer { child.finish() }
        let third = ServedPort()
        defer { third.stop() }
        let reply = try child.worker.blockingRequest(
            Message(id: WorkerOp.talkToPassedPort, components: [.port(third.port.makeSendPort())]))
        #expect(reply.text == "sent to 1")
        #expect(eventually { third.received.all.map(\.text) == ["hello from the child"] })
    }

    @Test func pipesRefuseDescriptorsAtTheSender() throws {
        let child = try WorkerChild(channel: .pipes)
        defer { child.finish() }
        #expect(throws: PortError.descriptorsNeedASocket) {
            try child.worker.send(Message(components: [.descriptor(0)]))
        }
    }

    /// Over pipes too: writing to a dead child's pipe must not raise SIGPIPE (it would end
    /// this test process).
    @Test(arguments: [ChildWorker.Channel.socket, .pipes])
    func killingTheChildInvalidatesAndFailsWaiters(channel: ChildWorker.Channel) throws {
        let child = try WorkerChild(channel: channel)
        let told = Counter()
        try child.worker.onInvalidation(on: child.boss.thread.loop) { _ in told.increment() }
        let outcome = Locked<Result<Message, PortError>?>(nil)
        let worker = child.worker
        let requester = LoopThread(name: "requester") { _ in
            let result = Result { () throws(PortError) -> Message in
                try worker.blockingRequest(Message(id: WorkerOp.sleepThenReply, text: "20000"), receiveTimeout: .seconds(60))
            }
            outcome.withLock { $0 = result }
        }
        // Kill mid-stream: one-way messages flow while the request waits in the child.
        #expect(eventually { child.boss.received.all.contains { $0.text == "sleeping" } })
        for i in 0..<100 { try? worker.send(streamMessage(UInt64(i)), timeout: .milliseconds(100)) }
        child.child.kill(SIGKILL)
        child.child.wait()
        #expect(requester.join(timeout: .seconds(60)))
        #expect(throws: PortError.peerDied) { try outcome.withLock { $0 }?.get() }
        #expect(eventually { told.count == 1 })
        #expect(!worker.isValid)
        #expect(throws: PortError.self) { try worker.send(Message(id: 1), timeout: .seconds(1)) }
        #expect(throws: PortError.self) { try worker.send(Message(id: 1), timeout: .seconds(1)) }
        child.boss.stop()
    }

    /// A child streaming to its boss while another thread sends it requests, SIGKILLed
    /// mid-stream, cycle after cycle for a time (`StressBudget`: `PORTKIT_STRESS_SECONDS`):
    /// in every cycle the requester ends with `peerDied`, no system call meets a descriptor
    /// that was closed under it, and no descriptor is left open. In a helper process, so
    /// that no other test's descriptors or system calls are counted.
    @Test(arguments: [ChildWorker.Channel.socket, .pipes])
    func aSendRacingItsPeersDeathFailsWithPeerDiedAndTouchesNoClosedDescriptor(channel: ChildWorker.Channel) throws {
        let budget = StressBudget.fromEnvironment()
        let (status, output) = try ChildProcess.run(
            "port-death-race", budget.arguments + (channel == .pipes ? ["pipes"] : []), within: budget.hangLimit)
        #expect(status == 0, "helper said: \(output)")
        let fields = keyValueFields(output).compactMapValues { Int($0) }
        let cycles = try #require(fields["cycles"], "helper said: \(output)")
        #expect(cycles >= budget.minimumCycles, "helper said: \(output)")
        #expect(fields["badCycles"] == 0, "a cycle's requester did not end with peerDied alone: \(output)")
        #expect(fields["peerDied"] == cycles, "every cycle's requester ends with peerDied: \(output)")
        #expect(fields["invalidPort"] == 0, "helper said: \(output)")
        #expect(fields["other"] == 0, "helper said: \(output)")
        #expect(fields["badDescriptors"] == 0, "a system call met a closed descriptor: \(output)")
        #expect(fields["before"] != nil && fields["before"] == fields["after"], "descriptors leaked: \(output)")
    }

    /// Children spawned, checked in, asked once and SIGKILLed, one after another for a
    /// time (`StressBudget`): after every cycle this process has the descriptors it had
    /// before it.
    @Test func noDescriptorLeaksOverChildCycles() throws {
        let budget = StressBudget.fromEnvironment()
        let (status, output) = try ChildProcess.run("port-child-cycles", budget.arguments, within: budget.hangLimit)
        #expect(status == 0, "helper said: \(output)")
        let fields = keyValueFields(output).compactMapValues { Int($0) }
        let cycles = try #require(fields["cycles"], "helper said: \(output)")
        #expect(cycles >= budget.minimumCycles, "helper said: \(output)")
        #expect(fields["leakingCycles"] == 0, "a cycle left a descriptor open: \(output)")
        #expect(fields["before"] != nil && fields["before"] == fields["after"], "children came and went: \(output)")
    }
}
