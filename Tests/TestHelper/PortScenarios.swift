import Foundation
import Glibc
import PortMessaging
import PortKitTestSupport
import Synchronization
import PortKitLocks

/// A check-in worker: checks in with the boss that spawned it, then serves WorkerOp
/// messages on the main thread's loop until told to exit or the boss goes away.
@Sendable func portWorker(_ arguments: [String]) -> Int32 {
    do {
        let boss = try ChildWorker.bossPort()
        let loop = ThreadLoop.current
        // `--max-message-bytes N`: the port's limit, above the default.
        let limit = arguments.firstIndex(of: "--max-message-bytes").flatMap { Int(arguments[$0 + 1]) }
        let port = ReceivePort(maxMessageBytes: limit ?? ReceivePort.defaultMaxMessageBytes)
        let streamed = Locked((count: 0, inOrder: true))
        try port.schedule(on: loop) { message in
            switch message.id {
            case WorkerOp.echo:
                return Message(id: WorkerOp.echo, bytes: message.bytes)
            case WorkerOp.stream:
                let value = message.bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                streamed.withLock { s in
                    if value != UInt64(s.count) { s.inOrder = false }
                    s.count += 1
                }
                return nil
            case WorkerOp.streamReport:
                let (count, inOrder) = streamed.withLock { ($0.count, $0.inOrder) }
                return Message(id: WorkerOp.streamReport, text: "\(count) \(inOrder)")
            case WorkerOp.sleepThenReply:
                let milliseconds = Int(message.text) ?? 0
                try? boss.send(Message(id: WorkerOp.sleepThenReply, text: "sleeping"), timeout: .seconds(10))
                // The delay under test: a handler slower than the requester's receive timeout.
                usleep(UInt32(milliseconds * 1000))
                return Message(id: WorkerOp.sleepThenReply, text: "slept")
            case WorkerOp.writeToDescriptor:
                for fd in message.descriptors {
                    _ = "written by the child".withCString { write(fd, $0, strlen($0)) }
                    close(fd)
                }
                return Message(id: WorkerOp.writeToDescriptor, text: "wrote \(message.descriptors.count)")
            case WorkerOp.talkToPassedPort:
                for passed in message.ports {
                    try? passed.send(Message(id: WorkerOp.fromPassedPort, text: "hello from the child"), timeout: .seconds(10))
                }
                return Message(id: WorkerOp.talkToPassedPort, text: "sent to \(message.ports.count)")
            case WorkerOp.sendBack:
                try? boss.send(Message(id: WorkerOp.sendBack, text: "one-way from the child"), timeout: .seconds(10))
                return nil
            case WorkerOp.streamToBoss:
                Thread.detachNewThread {
                    let chunk = Message(id: WorkerOp.streamed, bytes: [UInt8](repeating: 7, count: 512))
                    while (try? boss.send(chunk, timeout: .seconds(10))) != nil {}
                }
                return Message(id: WorkerOp.streamToBoss, text: "streaming")
            case WorkerOp.exit:
                exit(0)
            default:
                return Message(id: 0, text: "unknown id \(message.id)")
            }
        }
        try boss.onInvalidation(on: loop) { _ in exit(0) }  // the boss went away
        try PortCheckIn.checkIn(to: boss, from: port)
        try loop.run()
        return 0
    } catch {
        FileHandle.standardError.write("port-worker: \(error)\n".data(using: .utf8)!)
        return 1
    }
}

/// `port-child-cycles --seconds S --minimum N [pipes]`: for S seconds and at least N cycles,
/// spawns a port worker (this same executable), checks it in, does one request, kills it
/// with SIGKILL, and checks that this process's descriptors are back to their count before
/// it. Prints "cycles=N leakingCycles=N before=N after=M": the cycles run, those after which
/// a descriptor stayed open, and the descriptor counts after a warm-up cycle and the last.
@Sendable func portChildCycles(_ arguments: [String]) -> Int32 {
    guard let budget = StressBudget(arguments: arguments) else { return usage("port-child-cycles --seconds S --minimum N [pipes]") }
    let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    let channel: ChildWorker.Channel = arguments.contains("pipes") ? .pipes : .socket
    func cycle() throws {
        let loop = ThreadLoop.current
        let boss = ReceivePort()
        try boss.schedule(on: loop) { _ in nil }
        let child = try ChildWorker.spawn(executable: me, arguments: ["port-worker"], bossPort: boss, channel: channel)
        let worker = try PortCheckIn.awaitWorker(on: boss, timeout: .seconds(20))
        let reply = try worker.blockingRequest(Message(id: WorkerOp.echo, text: "ping"), receiveTimeout: .seconds(20))
        precondition(reply.text == "ping")
        child.kill(SIGKILL)
        child.wait()
        // Let the loop see the hang-up and close its side.
        while worker.isValid { _ = try loop.run(mode: .default, for: .milliseconds(10)) }
        worker.invalidate()
        boss.invalidate()
        _ = try loop.run(mode: .default, for: .zero)
    }
    do {
        try cycle()  // warm up what is opened once
        let before = openDescriptorCount()
        var leaking = 0
        let cycles = try budget.run { _ in
            try cycle()
            if openDescriptorCount() != before { leaking += 1 }
        }
        say("cycles=\(cycles) leakingCycles=\(leaking) before=\(before) after=\(openDescriptorCount())")
        return 0
    } catch {
        say("error: \(error)")
        return 1
    }
}
