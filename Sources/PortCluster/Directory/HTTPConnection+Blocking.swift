import Glibc
import PermanentThread

/// The blocking driver of an `HTTPConnection`: it polls the socket for what the machine
/// waits for, until a deadline. For `EtcdClient`'s blocking calls and `EtcdWatch`; a
/// loop drives the same machine with `HTTPLoopDriver`.
extension HTTPConnection {
    /// POSTs `body` (JSON) to `path` and reads the whole answer, by `deadline`. A kept
    /// connection the server closed meanwhile is opened again, once.
    func post(_ path: String, body: [UInt8], deadline: ContinuousClock.Instant) throws(HTTPFailure) -> Response {
        begin(path, body: body, streamed: false)
        guard case .answered(let response) = try drive(deadline: deadline) else { throw .malformed("a stream where an answer was expected") }
        return response
    }

    /// POSTs `body` to `path` and reads the head of a streamed answer; its status.
    func startStream(_ path: String, body: [UInt8], deadline: ContinuousClock.Instant) throws(HTTPFailure) -> Int {
        begin(path, body: body, streamed: true)
        guard case .streamOpened(let status) = try drive(deadline: deadline) else { throw .malformed("an answer where a stream was expected") }
        return status
    }

    /// The next newline-delimited message of a streamed answer, waiting until `deadline`;
    /// `nil` when the deadline passes first. A deadline that passes part way leaves the
    /// partial chunk unread for the next call.
    /// - Throws: `.broken` when the stream ends.
    func nextMessage(deadline: ContinuousClock.Instant) throws(HTTPFailure) -> [UInt8]? {
        while true {
            if let message = takeMessage() { return message }
            do throws(HTTPFailure) {
                if try readStream() { continue }
            } catch {
                close()
                throw error
            }
            do throws(HTTPFailure) { try wait(for: POLLIN, deadline: deadline) } catch .timedOut { return nil }
        }
    }

    /// Advances the exchange, polling for what it waits for, until it ends or opens a stream.
    private func drive(deadline: ContinuousClock.Instant) throws(HTTPFailure) -> Step {
        while true {
            let step = advance()
            switch step {
            case .wantsReadable: try wait(for: POLLIN, deadline: deadline)
            case .wantsWritable: try wait(for: POLLOUT, deadline: deadline)
            case .failed(let failure): throw failure
            case .answered, .streamOpened: return step
            }
        }
    }

    private func wait(for event: CInt, deadline: ContinuousClock.Instant) throws(HTTPFailure) {
        guard let socket else { throw .broken("not connected") }
        let left = deadline - .now
        guard left > .zero else {
            if case .streaming = phase {} else { close() }
            throw .timedOut
        }
        let ready: CShort
        do { ready = try socket.poll(CShort(event), timeout: left) } catch {
            close()
            throw .broken(error.description)
        }
        if ready == 0 {
            if case .streaming = phase {} else { close() }
            throw .timedOut
        }
    }
}
