import Glibc
import Testing
import PortKitTestSupport
@testable import PermanentThread

/// `spinBeforeSleep`: an idle thread keeps its CPU for a while before it sleeps.
@Suite("PermanentThread: spin before sleep")
struct PermanentThreadSpinTests {
    /// The scheduler's state of a thread of this process: "R" running, "S" asleep, ...
    private func schedulerState(_ threadID: Int32) -> String? {
        let descriptor = open("/proc/self/task/\(threadID)/stat", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: 512)
        let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        // "tid (comm) S ...": the state follows the last ')'.
        let text = String(decoding: bytes.prefix(count), as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ").first.map(String.init)
    }

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
        #expect(eventually { schedulerState(threadID) == "S" })
        let before = loop.wakeDeliveries
        #expect(try thread.sync { 42 } == 42)
        #expect(loop.wakeDeliveries == before + 1)
    }
}
