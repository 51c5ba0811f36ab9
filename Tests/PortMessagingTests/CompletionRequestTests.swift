import Glibc
import PermanentThread
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitLocks

/// `request(_:…:completion:)`: the call returns at once and the completion is called
/// exactly once, with the reply, the receive timeout, or the peer's end; a request that
/// cannot be sent throws and never calls it.
@Suite("Requests with a completion handler")
struct CompletionRequestTests {
    /// Records each completion's outcome, and how many times it was called.
    private final class Outcomes: Sendable {
        let recorded = Recorder<Result<Message, PortError>>()
        var handler: @Sendable (Result<Message, PortError>) -> Void { { [recorded] in recorded.append($0) } }
        var texts: [String] { recorded.all.map { (try? $0.get())?.text ?? "error \($0.error.map { "\($0)" } ?? "")" } }
    }

    @Test(arguments: AsyncRoute.allCases)
    func eachRequestsCompletionGetsItsOwnReplyOnceEvenAnsweredOutOfOrder(route: AsyncRoute) throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        // The server keeps the first two requests and answers them after the third.
        let held = Locked<[PendingReply]>([])
        try fixture.port.schedule(on: fixture.loop, deferringReplies: { message, pending in
            guard let pending else { return }
            if message.id < 3 { return held.withLock { $0.append(pending) } }
            _ = pending.reply(Message(id: 3, text: "third"))
            for (index, earlier) in held.withLock({ $0 }).enumerated().reversed() { _ = earlier.reply(Message(id: UInt32(index + 1), text: "reply \(index + 1)")) }
        })
        let port = try route.sendPort(to: fixture.port)
        let outcomes = Outcomes()
        for id in 1...2 { try port.request(Message(id: UInt32(id)), receiveTimeout: .seconds(30), completion: outcomes.handler) }
        #expect(eventually { held.withLock { $0.count } == 2 })
        #expect(outcomes.recorded.all.isEmpty)
        try port.request(Message(id: 3), receiveTimeout: .seconds(30), completion: outcomes.handler)
        #expect(eventually(timeout: .seconds(30)) { outcomes.recorded.all.count == 3 })
        #expect(outcomes.texts == ["third", "reply 2", "reply 1"])
        // Exactly once: nothing more comes.
        #expect(try port.blockingRequest(Message(id: 3), receiveTimeout: .seconds(30)).text == "third")
        #expect(outcomes.recorded.all.count == 3)
    }

    @Test(arguments: AsyncRoute.allCases)
    func anUnansweredRequestCompletesWithItsReceiveTimeoutAndALateReplyIsDropped(route: AsyncRoute) throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        let held = Locked<PendingReply?>(nil)
        try fixture.port.schedule(on: fixture.loop, deferringReplies: { message, pending in
            if message.id == 1 { held.withLock { $0 = pending } } else { _ = pending?.reply(Message(id: message.id, text: "on time")) }
        })
        let port = try route.sendPort(to: fixture.port)
        let outcomes = Outcomes()
        try port.request(Message(id: 1), receiveTimeout: .milliseconds(200), completion: outcomes.handler)
        #expect(eventually(timeout: .seconds(30)) { outcomes.recorded.all.count == 1 })
        #expect(outcomes.recorded.all.first?.error == .receiveTimedOut)
        #expect(held.withLock { $0 }?.reply(Message(id: 1, text: "late")) == true)
        #expect(try port.blockingRequest(Message(id: 2), receiveTimeout: .seconds(30)).text == "on time")
        #expect(outcomes.recorded.all.count == 1)
    }

    /// Over a connection: the receiving port's end completes a waiting request with
    /// `peerDied`; a request on the dead connection then throws, and its completion is
    /// never called.
    @Test func thePeersEndCompletesAWaitingRequestAndAnUnsendableOneThrows() throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        let received = TestLatch()
        // Kept unanswered (a reply let go would refuse the request) until the port is gone.
        let held = Locked<[PendingReply]>([])
        try fixture.port.schedule(on: fixture.loop, deferringReplies: { _, pending in
            if let pending { held.withLock { $0.append(pending) } }
            received.open()
        })
        let port = try AsyncRoute.socket.sendPort(to: fixture.port)
        let outcomes = Outcomes()
        try port.request(Message(id: 1), receiveTimeout: .seconds(60), completion: outcomes.handler)
        #expect(received.wait(timeout: .seconds(30)))
        fixture.port.invalidate()
        #expect(eventually(timeout: .seconds(30)) { outcomes.recorded.all.count == 1 })
        #expect(outcomes.recorded.all.first?.error == .peerDied)

        // The connection is known closed now: the next request is not sent.
        let later = Outcomes()
        #expect(throws: PortError.peerDied) {
            try port.request(Message(id: 2), receiveTimeout: .seconds(30), completion: later.handler)
        }
        #expect(later.recorded.all.isEmpty)
        #expect(held.withLock { $0.count } == 1)
    }

    /// `readReplies(on:)`: the replies of a connection no port reads are read by the loop
    /// chosen, and the completion handlers run there; asked again, the first loop stays.
    @Test func repliesReadOnAChosenLoopCompleteThere() throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        try fixture.port.schedule(on: fixture.loop) { Message(id: $0.id, text: "reply \($0.id)") }
        let port = try AsyncRoute.socket.sendPort(to: fixture.port)
        let chosen = try startedThread("replies-here")
        defer { chosen.stop() }
        let chosenLoop = try #require(chosen.loop)
        try port.readReplies(on: chosenLoop)
        try port.readReplies(on: fixture.loop)
        let whereCompleted = Recorder<String>()
        for id in 1...3 {
            try port.request(Message(id: UInt32(id)), receiveTimeout: .seconds(30)) { outcome in
                whereCompleted.append("\((try? outcome.get())?.text ?? "error") on \(chosenLoop.isCurrent ? "chosen" : "another")")
            }
        }
        #expect(eventually(timeout: .seconds(30)) { whereCompleted.all.count == 3 })
        #expect(whereCompleted.all == ["reply 1 on chosen", "reply 2 on chosen", "reply 3 on chosen"])
        // A blocking request on the same port is handed its reply by that loop too.
        #expect(try port.blockingRequest(Message(id: 4), receiveTimeout: .seconds(30)).text == "reply 4")
    }
    /// A loop chosen with `readReplies(on:)` whose thread stops while requests wait: the
    /// shared reply loop reads the connection from then on, so a reply that comes after the
    /// stop reaches its request, a waiting request's receive timeout still ends it, and later
    /// requests, async and blocking, get their replies.
    @Test func whenTheChosenLoopsThreadStopsTheSharedReplyLoopReadsOn() async throws {
        let fixture = try AsyncFixture()
        defer { fixture.stop() }
        let held = Locked<[UInt32: PendingReply]>([:])
        try fixture.port.schedule(on: fixture.loop, deferringReplies: { message, pending in
            guard let pending else { return }
            if message.id < 3 { return held.withLock { $0[message.id] = pending } }
            _ = pending.reply(Message(id: message.id, text: "reply \(message.id)"))
        })
        let port = try AsyncRoute.socket.sendPort(to: fixture.port)
        let chosen = try startedThread("replies-then-gone")
        try port.readReplies(on: #require(chosen.loop))
        let answered = Outcomes()
        let unanswered = Outcomes()
        try port.request(Message(id: 1), receiveTimeout: .seconds(60), completion: answered.handler)
        try port.request(Message(id: 2), receiveTimeout: .milliseconds(300), completion: unanswered.handler)
        #expect(eventually(timeout: .seconds(30)) { held.withLock { $0.count } == 2 })
        chosen.stop()

        #expect(held.withLock { $0[1] }?.reply(Message(id: 1, text: "reply 1")) == true)
        #expect(eventually(timeout: .seconds(30)) { answered.recorded.all.count == 1 })
        #expect(answered.texts == ["reply 1"])
        #expect(eventually(timeout: .seconds(30)) { unanswered.recorded.all.count == 1 })
        #expect(unanswered.recorded.all.first?.error == .receiveTimedOut)
        #expect(try await port.request(Message(id: 3), receiveTimeout: .seconds(30)).text == "reply 3")
        #expect(try port.blockingRequest(Message(id: 4), receiveTimeout: .seconds(30)).text == "reply 4")
    }
}
