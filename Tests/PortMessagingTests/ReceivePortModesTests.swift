import Glibc
import PortKitTestSupport
import Testing
@testable import PortMessaging

/// A port added to and taken out of modes one by one, as NSPort's
/// `scheduleInRunLoop:forMode:` and `removeFromRunLoop:forMode:` do: its in-process queue,
/// its listener and its connections all follow.
@Suite("Ports in modes, one by one")
struct ReceivePortModesTests {
    static let quiet = LoopMode("portkit.test.quiet")

    @Test func aPortFollowsTheModesItIsAddedToAndRemovedFrom() throws {
        try withOwnLoop { loop in
            let port = ReceivePort()
            defer { port.invalidate() }
            let received = Recorder<String>()
            #expect(port.modes.isEmpty)
            #expect(throws: PortError.notScheduled) { try port.add(toMode: Self.quiet) }
            try port.schedule(on: loop, inModes: [.default]) { message in
                received.append(message.text)
                return nil
            }
            #expect(port.modes == [.default])
            let address = PortAddress.abstract("portkit-modes-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
            try port.listen(at: address)

            // Not in the quiet mode yet: running it handles nothing of the port's.
            try port.makeSendPort().send(Message(text: "local 1"))
            #expect(try loop.run(mode: Self.quiet, for: .milliseconds(50), returnAfterSourceHandled: true) == .finished)
            #expect(received.all.isEmpty)

            // Added: the queue, the listener (a new peer) and that peer's connection all work there.
            try port.add(toMode: Self.quiet)
            try port.add(toMode: Self.quiet)
            #expect(port.modes == [.default, Self.quiet])
            let remote = try SendPort.connect(to: address)
            defer { remote.invalidate() }
            try remote.send(Message(text: "remote 1"), timeout: .seconds(10))
            let deadline = ContinuousClock.now + .seconds(30)
            while received.count < 2 && ContinuousClock.now < deadline {
                _ = try loop.run(mode: Self.quiet, until: deadline, returnAfterSourceHandled: true)
            }
            #expect(received.all == ["local 1", "remote 1"])

            // Out of the default mode: running it delivers nothing; the quiet mode still does.
            port.remove(fromMode: .default)
            port.remove(fromMode: .default)
            #expect(port.modes == [Self.quiet])
            try port.makeSendPort().send(Message(text: "local 2"))
            try remote.send(Message(text: "remote 2"), timeout: .seconds(10))
            #expect(try loop.run(mode: .default, for: .milliseconds(50), returnAfterSourceHandled: true) == .finished)
            #expect(received.count == 2)
            while received.count < 4 && ContinuousClock.now < deadline {
                _ = try loop.run(mode: Self.quiet, until: deadline, returnAfterSourceHandled: true)
            }
            #expect(Set(received.all.suffix(2)) == ["local 2", "remote 2"])

            port.invalidate()
            #expect(throws: PortError.invalidPort) { try port.add(toMode: .default) }
        }
    }
}
