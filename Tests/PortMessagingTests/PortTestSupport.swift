import Foundation
import Glibc
import PortKitTestSupport
@testable import PortMessaging
import PortKitSystem

/// A receive port served on a thread of its own, recording what its handler saw.
final class ServedPort: Sendable {
    let port: ReceivePort
    let thread: LoopThread
    let received = Recorder<Message>()

    /// Schedules `port` on a new loop thread with `reply` as the handler (after recording).
    init(_ port: ReceivePort = ReceivePort(), reply: @escaping @Sendable (Message) -> Message? = { _ in nil }) {
        self.port = port
        let received = self.received
        thread = LoopThread(name: "served-port") { loop in
            let keep = keepAlive()
            try! loop.add(keep, forMode: .default)
            _ = try! loop.run(mode: .default, until: .now + .seconds(600))
            keep.invalidate()
        }
        try! port.schedule(on: thread.loop) { message in
            received.append(message)
            return reply(message)
        }
    }

    func stop() {
        port.invalidate()
        thread.loop.stop()
        _ = thread.join()
    }
}

/// A worker child process (the test helper's `port-worker`), checked in with a boss port
/// served on a thread of its own.
final class WorkerChild: Sendable {
    let boss: ServedPort
    let child: ChildWorker
    let worker: SendPort

    init(channel: ChildWorker.Channel = .socket, arguments: [String] = []) throws {
        boss = ServedPort()
        child = try ChildWorker.spawn(
            executable: ChildProcess.helperPath, arguments: ["port-worker"] + arguments, bossPort: boss.port, channel: channel)
        worker = try PortCheckIn.awaitWorker(on: boss.port, timeout: .seconds(30))
    }

    func finish() {
        try? worker.send(Message(id: WorkerOp.exit), timeout: .seconds(5))
        child.wait()
        boss.stop()
    }
}

func streamMessage(_ value: UInt64) -> Message {
    withUnsafeBytes(of: value) { Message(id: WorkerOp.stream, bytes: Array($0)) }
}

/// The `KEY=VALUE` words of a helper's output line (a later key wins).
func keyValueFields(_ output: String) -> [String: String] {
    var fields: [String: String] = [:]
    for word in output.split(whereSeparator: \.isWhitespace) {
        let parts = word.split(separator: "=", maxSplits: 1)
        if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
    }
    return fields
}

/// Reads wire frames from `socket` (raw, as a peer that is not PortKit would) until `done`
/// says the frames so far are enough, the socket ends, or 30 s pass with nothing to read.
func readFrames(from socket: FileDescriptor, until done: ([WireMessage]) -> Bool) throws -> [WireMessage] {
    var splitter = WireFrameSplitter(limits: .transport())
    var frames: [WireMessage] = []
    var buffer = [UInt8](repeating: 0, count: 256 * 1024)
    while !done(frames) {
        guard try socket.poll(CShort(POLLIN), timeout: .seconds(30)) != 0 else { break }
        let count = buffer.withUnsafeMutableBytes { read(socket.rawValue, $0.baseAddress, $0.count) }
        guard count > 0 else { break }
        splitter.append(Array(buffer.prefix(count)))
        while let frame = try splitter.nextFrame() {
            frames.append(try frame.withUnsafeBytes { try WireCodec.decode($0, descriptorCount: 0) })
        }
    }
    return frames
}
