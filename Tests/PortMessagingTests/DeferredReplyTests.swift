import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging

/// A handler that keeps a request's `PendingReply` and answers later, from another thread;
/// one that lets it go unanswered fails the request with `noReply`, never leaving the
/// requester to its timeout.
@Suite("Deferred replies")
struct DeferredReplyTests {
    enum Route: String, CaseIterable { case inProcess, socket }

    /// A port on its own loop thread whose handler hands every request's `PendingReply`
    /// to `kept` (or drops it when `keep` is false).
    final class DeferringPort: Sendable {
        let port = ReceivePort()
        let thread: LoopThread
        let kept = Recorder<PendingReply>()
        let oneWay = Recorder<Message>()

        init(keep: Bool = true) throws {
            thread = LoopThread(name: "deferring-port") { loop in
                let keepAlive = keepAlive()
                try! loop.add(keepAlive, forMode: .default)
                _ = try! loop.run(mode: .default, until: .now + .seconds(600))
                keepAlive.invalidate()
            }
            let (kept, oneWay) = (self.kept, self.oneWay)
            try port.schedule(on: thread.loop) { message, pending in
                guard let pending else { return oneWay.append(message) }
                if keep { kept.append(pending) }
            }
        }

        func sendPort(_ route: Route) throws -> SendPort {
            let local = port.makeSendPort()
            return route == .inProcess ? local : SendPort(adoptingSocket: try local.transferableEnd().end)
        }

        func stop() {
            port.invalidate()
            thread.loop.stop()
            _ = thread.join()
        }
    }

    @Test(arguments: Route.allCases)
    func aReplyGivenLaterFromAnotherThreadArrives(route: Route) throws {
        let served = try DeferringPort()
        defer { served.stop() }
        let port = try served.sendPort(route)
        defer { port.invalidate() }
        let answerer = LoopThread(name: "answerer") { _ in
            // Answers each request once it is kept, on this thread, not the port's.
            for index in 0..<3 {
                guard eventually(timeout: .seconds(60), { served.kept.count > index }) else { return }
                let pending = served.kept.all[index]
                #expect(pending.reply(Message(id: pending.requestID, text: "later \(index)")))
                #expect(!pending.reply(Message(text: "twice")), "a reply goes once")
            }
        }
        defer { _ = answerer.join() }
        for index in 0..<3 {
            let reply = try port.blockingRequest(Message(id: UInt32(10 + index)), receiveTimeout: .seconds(60))
            #expect(reply.text == "later \(index)")
            #expect(reply.id == UInt32(10 + index))
        }
        try port.send(Message(id: 99, text: "one-way"), timeout: .seconds(10))
        #expect(eventually { served.oneWay.all.map(\.text) == ["one-way"] }, "a one-way message comes without a PendingReply")
    }

    @Test(arguments: Route.allCases)
    func aPendingReplyDroppedUnansweredFailsTheRequestAtOnce(route: Route) throws {
        let served = try DeferringPort(keep: false)
        defer { served.stop() }
        let port = try served.sendPort(route)
        defer { port.invalidate() }
        let start = ContinuousClock.now
        #expect(throws: PortError.noReply) { try port.blockingRequest(Message(id: 1), receiveTimeout: .seconds(600)) }
        // Not the receive timeout: the refusal ended the wait (generous, for a slow machine).
        #expect(ContinuousClock.now - start < .seconds(300))
        #expect(throws: PortError.noReply) { try port.blockingRequest(Message(id: 2), receiveTimeout: .seconds(600)) }
    }

    @Test(arguments: Route.allCases)
    func refusingEndsTheWaitAndALateReplyReachesNoOtherRequest(route: Route) throws {
        let served = try DeferringPort()
        defer { served.stop() }
        let port = try served.sendPort(route)
        defer { port.invalidate() }
        // The first request gives up before its reply comes.
        #expect(throws: PortError.receiveTimedOut) { try port.blockingRequest(Message(id: 1), receiveTimeout: .milliseconds(200)) }
        #expect(eventually { served.kept.count == 1 })
        let late = served.kept.all[0]
        // The second is refused explicitly...
        let refuser = LoopThread(name: "refuser") { _ in
            guard eventually(timeout: .seconds(60), { served.kept.count == 2 }) else { return }
            #expect(late.reply(Message(id: 1, text: "too late")))
            #expect(served.kept.all[1].refuse())
            #expect(!served.kept.all[1].reply(Message(text: "after the refusal")))
        }
        #expect(throws: PortError.noReply) { try port.blockingRequest(Message(id: 2), receiveTimeout: .seconds(60)) }
        _ = refuser.join()
        // ...and the third gets its own answer, never the first one's late reply.
        let third = LoopThread(name: "third") { _ in
            guard eventually(timeout: .seconds(60), { served.kept.count == 3 }) else { return }
            served.kept.all[2].reply(Message(id: 3, text: "third"))
        }
        defer { _ = third.join() }
        #expect(try port.blockingRequest(Message(id: 3), receiveTimeout: .seconds(60)).text == "third")
        #expect(late.isAnswered)
    }

    /// Eight requests in flight at once on one send port, from eight threads, answered in
    /// the reverse order: each gets its own reply. Over a socket the requesters read the
    /// connection themselves, one at a time, handing each other their replies.
    @Test(arguments: Route.allCases)
    func severalRequestsInFlightOnOneConnectionEachGetTheirOwnReply(route: Route) throws {
        let served = try DeferringPort()
        defer { served.stop() }
        let port = try served.sendPort(route)
        defer { port.invalidate() }
        let count = 8
        let replies = Recorder<(sent: UInt32, got: String)>()
        let failures = Recorder<String>()
        let requesters = (0..<count).map { index in
            LoopThread(name: "requester-\(index)") { _ in
                do {
                    let id = UInt32(100 + index)
                    let reply = try port.blockingRequest(Message(id: id, text: "\(index)"), receiveTimeout: .seconds(120))
                    replies.append((id, reply.text))
                } catch {
                    failures.append("\(index): \(error)")
                }
            }
        }
        // Every request is in before any is answered: all eight are in flight together.
        #expect(eventually(timeout: .seconds(60)) { served.kept.count == count })
        for pending in served.kept.all.reversed() {
            pending.reply(Message(id: pending.requestID, text: "answer to \(pending.requestID)"))
        }
        for requester in requesters { #expect(requester.join(timeout: .seconds(120))) }
        #expect(failures.all.isEmpty, "\(failures.all)")
        #expect(replies.count == count)
        for (sent, got) in replies.all { #expect(got == "answer to \(sent)") }
        // One that gives up meanwhile leaves the others' replies alone.
        let patient = LoopThread(name: "patient") { _ in
            let reply = try? port.blockingRequest(Message(id: 7, text: "patient"), receiveTimeout: .seconds(120))
            replies.append((7, reply?.text ?? "none"))
        }
        #expect(eventually(timeout: .seconds(60)) { served.kept.count == count + 1 })
        #expect(throws: PortError.receiveTimedOut) { try port.blockingRequest(Message(id: 8), receiveTimeout: .milliseconds(300)) }
        #expect(eventually(timeout: .seconds(60)) { served.kept.count == count + 2 })
        served.kept.all[count + 1].reply(Message(id: 8, text: "too late for 8"))
        served.kept.all[count].reply(Message(id: 7, text: "answer to 7"))
        #expect(patient.join(timeout: .seconds(120)))
        #expect(replies.all.last?.got == "answer to 7")
    }

    /// A request sent without waiting for its reply (`send(request:)`) and a second one
    /// behind it: over a socket the second's requester reads the first's reply on its way
    /// and keeps it; the first is collected afterwards. A collection that times out leaves
    /// the request to be collected again.
    @Test(arguments: Route.allCases)
    func aRequestSentAheadIsCollectedAfterTheOneBehindIt(route: Route) throws {
        let served = try DeferringPort()
        defer { served.stop() }
        let port = try served.sendPort(route)
        defer { port.invalidate() }
        let ahead = try port.send(request: Message(id: 1, text: "ahead"))
        #expect(eventually(timeout: .seconds(60)) { served.kept.count == 1 })
        let behindReplies = Recorder<String>()
        let behind = LoopThread(name: "behind") { _ in
            let reply = try? port.blockingRequest(Message(id: 2, text: "behind"), receiveTimeout: .seconds(120))
            behindReplies.append(reply?.text ?? "none")
        }
        #expect(eventually(timeout: .seconds(60)) { served.kept.count == 2 })
        for pending in served.kept.all { pending.reply(Message(id: pending.requestID, text: "answer to \(pending.requestID)")) }
        #expect(behind.join(timeout: .seconds(120)))
        #expect(behindReplies.all == ["answer to 2"])
        #expect(try ahead.reply(timeout: .seconds(60)).text == "answer to 1")

        let late = try port.send(request: Message(id: 3, text: "late"))
        #expect(throws: PortError.receiveTimedOut) { try late.reply(timeout: .milliseconds(100)) }
        #expect(eventually(timeout: .seconds(60)) { served.kept.count == 3 })
        served.kept.all[2].reply(Message(id: 3, text: "answer to 3"))
        #expect(try late.reply(timeout: .seconds(60)).text == "answer to 3")
    }
}
