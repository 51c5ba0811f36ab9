import Glibc
import Testing
@testable import PermanentThread
import PortKitSystem

/// The poller boundary, held by both Linux backends: what a run loop may count on whichever
/// it runs on (`PlatformPoller` picks one per process, `PORTKIT_POLLER=poll` the second).
@Suite("Pollers: epoll and poll(2) keep one contract")
struct PollerTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible {
        case epoll, poll
        var testDescription: String { rawValue }

        func make() throws -> any Poller {
            switch self {
            case .epoll: try EpollPoller()
            case .poll: try PollPoller()
            }
        }
    }

    /// Every event a poll (no sleep) reports now.
    private func pollNow(_ poller: any Poller) throws -> [UInt64: PollEvents] {
        var found: [UInt64: PollEvents] = [:]
        _ = try poller.wait(timeout: .zero) { found[$0.token, default: []].formUnion($0.events) }
        return found
    }

    @Test(arguments: Backend.allCases)
    func aReadyDescriptorIsReportedUnderItsTokenAndAParkedOneIsNot(backend: Backend) throws {
        let poller = try backend.make()
        defer { poller.close() }
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        try poller.register(pipe.read, interest: [.readable], token: 7)
        #expect(try pollNow(poller)[7] == nil)
        _ = try [UInt8]([1]).withUnsafeBytes { bytes throws(Errno) in try pipe.write.write(bytes) }
        #expect(try pollNow(poller)[7]?.contains(.readable) == true)
        try poller.modify(pipe.read, interest: [], token: 7)
        #expect(try pollNow(poller)[7] == nil)
        try poller.modify(pipe.read, interest: [.readable], token: 8)
        #expect(try pollNow(poller)[8]?.contains(.readable) == true)
        try poller.deregister(pipe.read)
        #expect(try pollNow(poller).isEmpty)
    }

    @Test(arguments: Backend.allCases)
    func theWriterGoingIsAHangUp(backend: Backend) throws {
        let poller = try backend.make()
        defer { poller.close() }
        let pair = try FileDescriptor.socketPair(type: CInt(SOCK_STREAM.rawValue))
        defer { try? pair.0.close() }
        try poller.register(pair.0, interest: [.readable], token: 3)
        try pair.1.close()
        let events = try #require(try pollNow(poller)[3])
        #expect(events.contains(.hangup))
    }

    @Test(arguments: Backend.allCases)
    func aWakeUpEndsASleepInEitherKind(backend: Backend) throws {
        let poller = try backend.make()
        defer { poller.close() }
        // No descriptor: the sleep the poller chooses, woken from another thread.
        let unwatched = poller.prepareToSleep()
        nonisolated(unsafe) let target = poller  // woken from the other thread: what wakeUp is for
        let waker = WakerThread { target.wakeUp(unwatched) }
        let start = ContinuousClock.now
        _ = try poller.wait(timeout: .seconds(60)) { _ in }
        #expect(start.duration(to: .now) < .seconds(30))
        waker.join()
        // With a descriptor: a sleep in the readiness set.
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        try poller.register(pipe.read, interest: [.readable], token: 1)
        let watching = poller.prepareToSleep()
        #expect(watching == .watching)
        poller.wakeUp(watching)
        #expect(try poller.wait(timeout: .seconds(60)) { _ in })
    }

    @Test(arguments: Backend.allCases)
    func whatEpollRefusesEveryBackendRefuses(backend: Backend) throws {
        let poller = try backend.make()
        defer { poller.close() }
        #expect(throws: Errno.badFileDescriptor) { try poller.register(FileDescriptor(rawValue: 99_999), interest: [.readable], token: 1) }
        let file = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        defer { _ = close(file) }
        #expect(throws: Errno(rawValue: EPERM)) { try poller.register(FileDescriptor(rawValue: file), interest: [.readable], token: 2) }
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        try poller.register(pipe.read, interest: [.readable], token: 3)
        #expect(throws: Errno.alreadyExists) { try poller.register(pipe.read, interest: [.readable], token: 4) }
    }

    /// The system call each backend waits in, as the fault seam names it.
    private func waitCall(_ backend: Backend) -> SystemCall { backend == .epoll ? .epollWait : .poll }

    @Test(arguments: Backend.allCases)
    func aFailedWaitIsATypedErrorAndAnInterruptedOneIsMadeAgain(backend: Backend) throws {
        let poller = try backend.make()
        defer { poller.close() }
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        try poller.register(pipe.read, interest: [.readable], token: 1)
        let (_, failed) = FaultSeam.injecting(.failure(Errno(rawValue: ENOMEM)), on: waitCall(backend)) {
            #expect(throws: Errno(rawValue: ENOMEM)) { try poller.wait(timeout: .zero) { _ in } }
        }
        #expect(failed == 1)
        _ = try [UInt8]([1]).withUnsafeBytes { bytes throws(Errno) in try pipe.write.write(bytes) }
        let (events, interrupted) = try FaultSeam.injecting(.failure(.interrupted), on: waitCall(backend), times: 2) {
            try pollNow(poller)
        }
        #expect(interrupted == 2)
        #expect(events[1]?.contains(.readable) == true)
    }

    @Test
    func aFailedEpollControlIsATypedErrorAndLeavesTheSetAsItWas() throws {
        let poller = try EpollPoller()
        defer { poller.close() }
        let pipe = try FileDescriptor.pipe()
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let (_, refused) = FaultSeam.injecting(.failure(Errno(rawValue: ENOSPC)), on: .epollControl) {
            #expect(throws: Errno(rawValue: ENOSPC)) { try poller.register(pipe.read, interest: [.readable], token: 5) }
        }
        #expect(refused == 1)
        // Not in the set: it can be added now (a second add would be refused, EEXIST).
        try poller.register(pipe.read, interest: [.readable], token: 5)
        let (_, unchanged) = FaultSeam.injecting(.failure(Errno(rawValue: ENOMEM)), on: .epollControl) {
            #expect(throws: Errno(rawValue: ENOMEM)) { try poller.modify(pipe.read, interest: [], token: 6) }
        }
        #expect(unchanged == 1)
        _ = try [UInt8]([1]).withUnsafeBytes { bytes throws(Errno) in try pipe.write.write(bytes) }
        #expect(try pollNow(poller)[5]?.contains(.readable) == true)
    }
}

/// A plain thread running one closure, joined by the test.
private final class WakerThread: @unchecked Sendable {
    // @unchecked Sendable: `handle` is set once, by init, before any other thread sees the
    // object, and read only by `join` on the thread that made it.
    private var handle = pthread_t()

    init(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(Box(body))
        pthread_create(&handle, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            box.body()
            return nil
        }, box.toOpaque())
    }

    func join() { pthread_join(handle, nil) }

    private final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
}
