import Foundation
import Glibc
import PermanentThread
import PortMessaging
import PortKitTestSupport
import Synchronization
import PortKitSystem
import PortKitLocks

/// `port-death-race --seconds S --minimum N [pipes]`: for S seconds and at least N cycles,
/// spawns a port worker, has it stream messages to its boss while another thread sends it
/// requests back to back, and SIGKILLs it mid-stream. In every cycle the requester must
/// end with exactly one failure, `peerDied`. Prints "cycles=N badCycles=N peerDied=N
/// invalidPort=N other=N badDescriptors=N before=N after=N": the cycles run, those whose
/// requester did not end with `peerDied` alone, the requests' failures by kind, the system
/// calls that met a closed descriptor, and this process's open descriptors after a warm-up
/// cycle and after the last.
@Sendable func portDeathRace(_ arguments: [String]) -> Int32 {
    guard let budget = StressBudget(arguments: arguments) else { return usage("port-death-race --seconds S --minimum N [pipes]") }
    let channel: ChildWorker.Channel = arguments.contains("pipes") ? .pipes : .socket
    let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    let failures = Locked([String: Int]())

    let badCycles = Counter()

    func cycle() throws {
        let failedBefore = failures.withLock { $0 }
        let loop = ThreadLoop.current
        let boss = ReceivePort()
        let streamed = Counter()
        try boss.schedule(on: loop) { message in
            if message.id == WorkerOp.streamed { streamed.increment() }
            return nil
        }
        let child = try ChildWorker.spawn(executable: me, arguments: ["port-worker"], bossPort: boss, channel: channel)
        let worker = try PortCheckIn.awaitWorker(on: boss, timeout: .seconds(60))
        let started = try worker.blockingRequest(Message(id: WorkerOp.streamToBoss), receiveTimeout: .seconds(60))
        precondition(started.text == "streaming")
        let replies = Counter()
        let requester = JoinableThread {
            while true {
                do throws(PortError) {
                    _ = try worker.blockingRequest(Message(id: WorkerOp.echo, text: "ping"), receiveTimeout: .seconds(60))
                    replies.increment()
                } catch {
                    let kind: String
                    switch error {
                    case .peerDied: kind = "peerDied"
                    case .invalidPort: kind = "invalidPort"
                    default: kind = "other"
                    }
                    failures.withLock { $0[kind, default: 0] += 1 }
                    if kind == "other" { say("unexpected: \(error)") }
                    return
                }
            }
        }
        // Mid-stream: messages are arriving and requests are going out when the child dies.
        let deadline = ContinuousClock.now + .seconds(60)
        while streamed.count < 3 || replies.count < 3, ContinuousClock.now < deadline {
            _ = try loop.run(mode: .default, for: .milliseconds(1))
        }
        child.kill(SIGKILL)
        child.wait()
        while worker.isValid, ContinuousClock.now < deadline { _ = try loop.run(mode: .default, for: .milliseconds(10)) }
        requester.join()
        // This cycle's requester failed once, with peerDied.
        let failedNow = failures.withLock { $0 }
        if failedNow.values.reduce(0, +) != failedBefore.values.reduce(0, +) + 1
            || failedNow["peerDied", default: 0] != failedBefore["peerDied", default: 0] + 1 {
            badCycles.increment()
        }
        worker.invalidate()
        boss.invalidate()
        _ = try loop.run(mode: .default, for: .zero)
    }
    do {
        try cycle()  // warm up what is opened once
        failures.withLock { $0 = [:] }
        let before = openDescriptorCount()
        let cycles = try budget.run { _ in try cycle() }
        // The last closes run on this loop's thread: let them.
        _ = try ThreadLoop.current.run(mode: .default, for: .milliseconds(50))
        let counts = failures.withLock { $0 }
        say("cycles=\(cycles) badCycles=\(badCycles.count) peerDied=\(counts["peerDied", default: 0]) invalidPort=\(counts["invalidPort", default: 0])"
            + " other=\(counts["other", default: 0])"
            + " badDescriptors=\(SystemCallAudit.badDescriptors.load(ordering: .relaxed))"
            + " before=\(before) after=\(openDescriptorCount())")
        return 0
    } catch {
        say("error: \(error)")
        return 1
    }
}
