import Foundation
import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitTestSupport
import Testing

/// A user imports Foundation beside PortKit: every name must resolve without a module prefix.
@Test func portKitAndFoundationNamesCoexist() throws {
    // On a thread of its own: the loop it makes ends with that thread.
    try withOwnLoop { _ in
        let loop: ThreadLoop = ThreadLoop.current  // owned thread
        let foundationLoop: RunLoop = RunLoop.current
        let timer: LoopTimer = LoopTimer(after: .seconds(60)) { _ in }
        let foundationTimer: Timer = Timer(timeInterval: 60, repeats: false) { _ in }
        let observer: LoopObserver = LoopObserver(activities: .all) { _, _ in }
        let source: LoopSource = LoopSource(perform: {})
        let thread: Thread = Thread.current
        let mode: LoopMode = .default
        let foundationMode: RunLoop.Mode = .default
        #expect(mode.rawValue == "default")
        #expect(foundationMode.rawValue.isEmpty == false)
        #expect(ObjectIdentifier(type(of: loop)) != ObjectIdentifier(type(of: foundationLoop)))
        #expect(timer.isValid && foundationTimer.isValid && observer.isValid && source.isValid)
        #expect(thread === Thread.current)
        timer.invalidate()
        foundationTimer.invalidate()
    }
}
