import Foundation
import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging

@Suite("Async receive: for await over a port's messages")
struct AsyncReceiveTests {
    /// How many messages wait in `port`'s in-process queue.
    private func queued(_ port: ReceivePort) -> Int { port.queue.withLock { $0.envelopes.count } }

    /// The ids of the first `count` messages of a new iteration of `fixture`'s port, taken
    /// by a task on its task thread; the iteration then ends.
    private func take(_ count: Int, from fixture: AsyncFixture) async throws -> [UInt32] {
        let messages = try fixture.port.messages(on: fixture.loop)
        return await take(count, from: messages, on: fixture)
    }

    /// The ids of the first `count` messages of `messages`, taken by a task on `fixture`'s
    /// task thread; the iteration then ends.
    private func take(_ count: Int, from messages: ReceivedMessages, on fixture: AsyncFixture) async -> [UInt32] {
        await fixture.onTasks {
            var taken: [UInt32] = []
            guard count > 0 else { return taken }
            for await received in messages {
                taken.append(received.message.id)
                if taken.count == count { break }
            }
            return taken
        }
    }

    /// A hundred requests wait in the queue; the consumer answers ten and leaves its loop.
    /// The ten get their replies, in order; the requests handed over but not taken are
    /// refused (`noReply`), at once; the rest stay queued, untaken, until the port is
    /// invalidated (`invalidPort`). Every sender hears, and the three groups follow the
    /// order of sending.
    @Test func aConsumerThatStopsEarlyAnswersWhatItTookAndRefusesWhatItHeld() async throws {
        let count = 100
        let fixture = try AsyncFixture()
        let senders = try startedThread("async-senders")
        defer { fixture.stop(); senders.stop() }
        try await fixture.run {
            let port = fixture.port
            let sendPort = port.makeSendPort()
            let outcomes = Recorder<(UInt32, Result<Message, PortError>)>()
            for id in 0..<UInt32(count) {
                Task(executorPreference: senders) {
                    let outcome = await Result { () async throws(PortError) in
                        try await sendPort.request(Message(id: id), receiveTimeout: .seconds(300))
                    }
                    outcomes.append((id, outcome))
                }
            }
            #expect(eventually { queued(port) == count })
            let messages = try port.messages(on: fixture.loop)
            let taken = await fixture.onTasks { () async -> [UInt32] in
                var taken: [UInt32] = []
                for await received in messages {
                    taken.append(received.message.id)
                    received.reply?.reply(Message(id: received.message.id, text: "answered"))
                    if taken.count == 10 { break }
                }
                return taken
            }
            #expect(taken == Array(0..<10))
            // Those handed over and not taken were refused as the iteration ended; the rest
            // were never taken: they stay in the queue.
            let stillQueued = queued(port)
            #expect(stillQueued > 0)
            #expect(eventually { outcomes.count == count - stillQueued })
            let refused = outcomes.all.filter { $0.1.error == .noReply }.map(\.0).sorted()
            #expect(refused == Array(10..<UInt32(count - stillQueued)))
            port.invalidate()
            #expect(eventually { outcomes.count == count })
            let all = outcomes.all.sorted { $0.0 < $1.0 }
            #expect(all.map(\.0) == Array(0..<UInt32(count)))
            for (id, outcome) in all {
                switch id {
                case 0..<10: #expect((try? outcome.get())?.text == "answered", "request \(id)")
                case 10..<(10 + UInt32(refused.count)): #expect(outcome.error == .noReply, "request \(id)")
                default: #expect(outcome.error == .invalidPort, "request \(id)")
                }
            }
        }
    }

    /// A hundred one-way messages; the first iteration takes ten and leaves its loop, a
    /// second iteration on the same loop gets the other ninety: every message once, in
    /// the order sent.
    @Test func oneWayMessagesNotTakenWaitForTheNextIteration() async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        try await fixture.run {
            let sendPort = fixture.port.makeSendPort()
            for id in 0..<UInt32(100) { try sendPort.send(Message(id: id), timeout: .seconds(30)) }
            let firstTaken = try await take(10, from: fixture)
            // Handed back in order: all ninety are queued again.
            #expect(eventually { queued(fixture.port) == 90 })
            let secondTaken = try await take(90, from: fixture)
            #expect(firstTaken == Array(0..<10))
            #expect(secondTaken == Array(10..<100))
        }
    }

    /// With nobody taking, a port of capacity 4 takes eight (four handed over, four
    /// queued) and then holds its senders back: the ninth waits its timeout and fails with
    /// `sendTimedOut`, unsent. Once the consumer takes, sending goes on; the consumer sees
    /// the eight and then the next, in order, never the one that failed.
    @Test func aSlowConsumerMakesSendersWaitThenFailWithSendTimedOut() async throws {
        let fixture = try AsyncFixture(capacity: 4)
        defer { fixture.stop() }
        try await fixture.run {
            let messages = try fixture.port.messages(on: fixture.loop)
            let sendPort = fixture.port.makeSendPort()
            for id in 1...UInt32(8) { try sendPort.send(Message(id: id), timeout: .seconds(30)) }
            #expect(eventually { queued(fixture.port) == 4 })
            let start = ContinuousClock.now
            #expect(throws: PortError.sendTimedOut) { try sendPort.send(Message(id: 9), timeout: .milliseconds(300)) }
            #expect(ContinuousClock.now - start >= .milliseconds(300))
            let taken = Task(executorPreference: fixture.tasks) { await take(9, from: messages, on: fixture) }
            try sendPort.send(Message(id: 10), timeout: .seconds(30))
            #expect(await taken.value == Array(1...8) + [10])
        }
    }

    /// Over a socket, with nobody taking, the port stops reading its connection: the
    /// socket fills and a sender's write fails with `sendTimedOut` (long before the 20 MB
    /// this test would send). The consumer then gets every message that was sent, in
    /// order, and nothing of the one that failed. (Messages of 1 KiB: the kernel takes each
    /// whole or not at all, so no frame is left half written.)
    @Test func aSlowConsumerStopsTheReadingOfItsConnections() async throws {
        let fixture = try AsyncFixture(capacity: 1)
        defer { fixture.stop() }
        try await fixture.run {
            let messages = try fixture.port.messages(on: fixture.loop)
            let sendPort = try AsyncRoute.socket.sendPort(to: fixture.port)
            let payload = [UInt8](repeating: 7, count: 1024)
            var sent: UInt32 = 0
            var failure: PortError?
            while sent < 20_000 {
                do throws(PortError) {
                    try sendPort.send(Message(id: sent, bytes: payload), timeout: .milliseconds(300))
                    sent += 1
                } catch {
                    failure = error
                    break
                }
            }
            #expect(failure == .sendTimedOut)
            #expect(sent > 0 && sent < 20_000)
            #expect(await take(Int(sent), from: messages, on: fixture) == Array(0..<sent))
            // The failed one never arrives: the next one sent does.
            try sendPort.send(Message(id: 5000), timeout: .seconds(30))
            #expect(try await take(1, from: fixture) == [5000])
        }
    }

    /// Cancelling the consuming task ends its iteration at once (its `for await` ends), and
    /// a message sent afterwards waits for the next iteration.
    @Test func cancellingTheConsumerEndsItsIterationAndLosesNothing() async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        try await fixture.run {
            let sendPort = fixture.port.makeSendPort()
            let messages = try fixture.port.messages(on: fixture.loop)
            let gotFirst = TestLatch()
            let task = Task(executorPreference: fixture.tasks) { () async -> [UInt32] in
                var taken: [UInt32] = []
                for await received in messages {
                    taken.append(received.message.id)
                    gotFirst.open()
                }
                return taken
            }
            try sendPort.send(Message(id: 1), timeout: .seconds(30))
            #expect(gotFirst.wait(timeout: .seconds(30)))
            task.cancel()
            #expect(await task.value == [1])
            try sendPort.send(Message(id: 2), timeout: .seconds(30))
            #expect(try await take(1, from: fixture) == [2])
        }
    }

    /// Messages from another process's connection reach the iteration too, and a request's
    /// reply goes back over it.
    @Test func requestsOverASocketAreAnsweredThroughTheIteration() async throws {
        let fixture = try AsyncFixture()
        let client = try startedThread("async-client")
        defer { fixture.stop(); client.stop() }
        try await fixture.run {
            let port = fixture.port
            let messages = try port.messages(on: fixture.loop)
            let sendPort = try AsyncRoute.socket.sendPort(to: port)
            let answering = Task(executorPreference: fixture.tasks) {
                for await received in messages {
                    received.reply?.reply(Message(id: received.message.id, text: "over \(received.message.id)"))
                }
            }
            let replies = try await Task(executorPreference: client) { () async throws -> [String] in
                var replies: [String] = []
                for id in 1...UInt32(5) { replies.append(try await sendPort.request(Message(id: id), receiveTimeout: .seconds(30)).text) }
                return replies
            }.value
            #expect(replies == (1...5).map { "over \($0)" })
            port.invalidate()
            await answering.value
        }
    }

    /// A port scheduled with a handler has no iteration to give; nor has a port while
    /// another iteration is under way, or on another loop.
    @Test func messagesRefusesAPortScheduledOtherwise() throws {
        let served = try startedThread("async-served")
        let other = try startedThread("async-other")
        defer { served.stop(); other.stop() }
        let loop = try #require(served.loop)
        let handled = ReceivePort()
        defer { handled.invalidate() }
        try handled.schedule(on: loop) { _ in nil }
        #expect(throws: PortError.alreadyScheduled) { _ = try handled.messages(on: loop) }
        let iterated = ReceivePort()
        defer { iterated.invalidate() }
        let messages = try iterated.messages(on: loop)
        #expect(throws: PortError.alreadyScheduled) { _ = try iterated.messages(on: loop) }
        #expect(throws: PortError.alreadyScheduled) { _ = try iterated.messages(on: try #require(other.loop)) }
        _ = messages
        let invalid = ReceivePort()
        invalid.invalidate()
        #expect(throws: PortError.invalidPort) { _ = try invalid.messages(on: loop) }
    }
}
