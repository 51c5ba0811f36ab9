import Glibc
import Testing
import PortKitTestSupport
@testable import PermanentThread

/// `spinBeforeSleep`: an idle thread keeps its CPU for a while before it sleeps.
@Suite("PermanentThread: spin before sleep")
struct PermanentThreadSpinTests {
    @Test func offByDefault() {
        #expect(PermanentThread(name: "spin-default").spinBeforeSleep == .zero)
        #expect(PermanentThread(name: "spin-negative", spinBeforeSleep: .seconds(-1)).spinBeforeSleep == .zero)
    }

    @Test func workThatComesDuringTheSpinNeedsNoWakeUp() throws {
        // A window far longer than the test, so that no call can come after it on a slow machine.
        let thread = PermanentThread(name: "spin-b2b", spinBeforeSleep: .seconds(60))
        try thread.run()
        defer { thread.stop() }
        let loop = try #require(thread.loop)
        try thread.sync {}
        let before = loop.wakeDeliveries
        var sum = 0
        for value in 1...200 { sum += try thread.sync { value } }
        #expect(sum == 200 * 201 / 2)
        #expect(loop.wakeDeliveries == before)
    }

    @Test func anIdleThreadSleepsOnceTheSpinHasPassedAndIsWokenForWork() throws {
        let thread = PermanentThread(name: "spin-idle", spinBeforeSleep: .milliseconds(5))
        try thread.run()
        defer { thread.stop() }
        let loop = try #require(thread.loop)
        let threadID = try #require(thread.threadID)
        try thread.sync {}
        #expect(eventually { schedulerState(ofThread: threadID) == "S" })
        let before = loop.wakeDeliveries
        #expect(try thread.sync { 42 } == 42)
        #expect(loop.wakeDeliveries == before + 1)
    }
}
