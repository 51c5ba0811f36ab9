import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging

/// NSMachPort code sees the check-in as a message with id 100 in its handler; a port that
/// asks for that gets it so, in-process and over a connection.
@Suite("Check-ins a boss handler sees")
struct CheckInHandlerTests {
    enum Route: String, CaseIterable { case inProcess, connection }

    @Test(arguments: Route.allCases)
    func aCheckInReachesTheHandlerWithTheWorkersPort(route: Route) throws {
        let boss = ServedPort()
        defer { boss.stop() }
        #expect(!boss.port.handsCheckInsToHandler)
        boss.port.handsCheckInsToHandler = true
        let address = PortAddress.abstract("portkit-checkin-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        if route == .connection { try boss.port.listen(at: address) }
        let bossSend = route == .inProcess ? boss.port.makeSendPort() : try SendPort.connect(to: address)
        let worker = LoopThread(name: "worker") { loop in
            let port = ReceivePort()
            try! port.schedule(on: loop) { Message(id: $0.id, text: "worker got \($0.text)") }
            try! PortCheckIn.checkIn(to: bossSend, from: port)
            _ = try! loop.run(mode: .default, until: .now + .seconds(120))
        }
        defer {
            worker.loop.stop()
            _ = worker.join()
        }
        #expect(eventually { boss.received.count == 1 })
        let checkIn = try #require(boss.received.all.first)
        #expect(checkIn.id == PortCheckIn.defaultMessageID)
        #expect(checkIn.sender?.pid == getpid())
        let workerPort = try #require(checkIn.replyPort)
        #expect(try workerPort.blockingRequest(Message(id: 1, text: "a job"), receiveTimeout: .seconds(30)).text == "worker got a job")
        // Handed to the handler, it is not also waiting for `awaitWorker`.
        #expect(throws: PortError.receiveTimedOut) { try PortCheckIn.awaitWorker(on: boss.port, timeout: .milliseconds(200)) }
    }
}
