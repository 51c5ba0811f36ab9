import Glibc
import Synchronization

/// The floor of an awaited request between two threads: about the least a task can do to
/// send a request and suspend until another thread hands it the reply. A socket pair; an
/// echo thread reads each request and writes a reply; a reader thread blocks in `read` on
/// the requester's end and resumes the waiting task with what it read. The same hops as any
/// awaited request over a socket: the task's thread, the answering thread, the thread that
/// reads the reply, and the task's thread again (through the task's executor).
final class RawAsyncRequester: Sendable {
    private let requester: CInt
    private let answerer: CInt
    private let echo: PosixThread
    private let reader: PosixThread
    /// The task waiting for its reply, if any.
    private let waiting = Waiting()

    private final class Waiting: Sendable {
        let task = Mutex<CheckedContinuation<[UInt8], Never>?>(nil)
    }

    /// Starts the two threads; the echo thread answers `requestSize` bytes with `replySize`.
    /// - Throws: `BenchmarkError.system` when the sockets or a thread cannot be made.
    init(requestSize: Int, replySize: Int) throws(BenchmarkError) {
        let (requester, answerer) = try RawSockets.streamPair()
        self.requester = requester
        self.answerer = answerer
        echo = try PosixThread.start(name: "raw-async-echo") {
            var request = [UInt8](repeating: 0, count: requestSize)
            var descriptor: CInt = -1
            let reply = [UInt8](repeating: 1, count: replySize)
            while RawSockets.receiveMessage(answerer, &request, descriptor: &descriptor) {
                guard RawSockets.sendMessage(answerer, reply) else { return }
            }
        }
        let waiting = self.waiting
        reader = try PosixThread.start(name: "raw-async-reader") {
            var reply = [UInt8](repeating: 0, count: replySize)
            var descriptor: CInt = -1
            while RawSockets.receiveMessage(requester, &reply, descriptor: &descriptor) {
                waiting.task.withLock { $0.take() }?.resume(returning: reply)
            }
        }
    }

    /// Sends `request` and suspends until its reply is read.
    func request(_ request: [UInt8]) async -> [UInt8] {
        await withCheckedContinuation { continuation in
            waiting.task.withLock { $0 = continuation }
            _ = RawSockets.sendMessage(requester, request)
        }
    }

    /// Ends both threads (the requester's end shut, the echo thread sees the end and closes
    /// its end, which ends the reader) and closes the sockets.
    func stop() {
        _ = shutdown(requester, CInt(SHUT_WR))
        echo.join()
        _ = shutdown(answerer, CInt(SHUT_WR))
        reader.join()
        _ = close(requester)
        _ = close(answerer)
    }
}
