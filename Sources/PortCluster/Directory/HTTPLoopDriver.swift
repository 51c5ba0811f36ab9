import PermanentThread
import PortMessaging

/// Drives an `HTTPConnection` from a loop: a descriptor source for what the exchange waits
/// for, a deadline timer per exchange, and a completion called on the loop. Nothing it
/// does waits: a directory that stops answering costs the loop nothing but the timer.
///
/// Requests go out one at a time, in the order they were sent (a claim sent after a
/// withdrawal reaches the directory after it). Or the connection carries one streamed
/// answer (`openStream`): its messages are handed on as they come, with no deadline.
// Safety of @unchecked Sendable: every member is used on `loop`'s thread only (the
// source's and the timer's handlers run there, and its owner calls it there).
final class HTTPLoopDriver: @unchecked Sendable {
    /// One request waiting for its turn, or under way.
    private struct Exchange {
        var path: String
        var body: [UInt8]
        var completion: (Result<HTTPConnection.Response, HTTPFailure>) -> Void
    }

    /// What the driver is doing.
    private enum Mode {
        /// Requests, answered in order (the first is under way).
        case requests([Exchange])
        /// A stream is being opened; then its messages are handed on.
        case opening(open: (Result<Int, HTTPFailure>) -> Void, messages: (Result<[[UInt8]], HTTPFailure>) -> Void)
        case streaming(messages: (Result<[[UInt8]], HTTPFailure>) -> Void)
    }

    private let http: HTTPConnection
    private let loop: ThreadLoop
    /// How long one exchange (or a stream's opening) may take.
    let timeout: Duration
    private var mode: Mode = .requests([])
    private var source: DescriptorSource?
    private var watched: DescriptorEvents = []
    private var deadline: LoopTimer?
    /// Whether a request's completion is being called.
    private var completing = false

    /// A driver of a connection to `host`:`port` (secured by `security`) on `loop`.
    init(host: String, port: UInt16, security: (any StreamSecurity)?, loop: ThreadLoop, timeout: Duration) {
        http = HTTPConnection(host: host, port: port, security: security)
        self.loop = loop
        self.timeout = timeout
        http.willClose = { [weak self] _ in self?.unwatch() }
    }

    deinit {
        // The source ends before the socket closes; `willClose` no longer reaches here.
        unwatch()
        close()
    }

    /// Ends everything: the connection closes, and what was under way or waiting fails
    /// with `.broken("closed")` (a stream's handler is not called).
    func close() {
        let waiting: [Exchange]
        if case .requests(let exchanges) = mode { waiting = exchanges } else { waiting = [] }
        mode = .requests([])
        endDeadline()
        http.close()
        for exchange in waiting { exchange.completion(.failure(.broken("closed"))) }
    }

    // MARK: Requests

    /// POSTs `body` (JSON) to `path` once the requests sent before are answered; calls
    /// `completion` on the loop with the answer, or why there is none (`.timedOut` when
    /// it took longer than `timeout`).
    func send(_ path: String, body: [UInt8], completion: @escaping (Result<HTTPConnection.Response, HTTPFailure>) -> Void) {
        guard case .requests(var exchanges) = mode else { return completion(.failure(.broken("the connection carries a stream"))) }
        exchanges.append(Exchange(path: path, body: body, completion: completion))
        mode = .requests(exchanges)
        if exchanges.count == 1 && !completing { startNext() }
    }

    private func startNext() {
        guard case .requests(let exchanges) = mode, let first = exchanges.first else { return }
        http.begin(first.path, body: first.body, streamed: false)
        startDeadline()
        advance()
    }

    // MARK: A stream

    /// Opens a streamed answer to `body` POSTed to `path` (the connection is the stream's
    /// from now on): `opened` with its status or why it failed (within `timeout`), then
    /// `messages` with the messages as they come, until the stream fails or ends (a
    /// failure, after which nothing more is called).
    func openStream(
        _ path: String, body: [UInt8], opened: @escaping (Result<Int, HTTPFailure>) -> Void,
        messages: @escaping (Result<[[UInt8]], HTTPFailure>) -> Void
    ) {
        close()
        mode = .opening(open: opened, messages: messages)
        http.begin(path, body: body, streamed: true)
        startDeadline()
        advance()
    }

    // MARK: The machine

    private func advance() {
        if case .streaming(let handler) = mode { return readStream(handler) }
        let step = http.advance()
        switch step {
        case .wantsReadable: watch(.readable)
        case .wantsWritable: watch(.writable)
        case .answered(let response): finish(.success(response))
        case .failed(let failure): finish(.failure(failure))
        case .streamOpened(let status):
            guard case .opening(let opened, let handler) = mode else { return finish(.failure(.malformed("an unasked stream"))) }
            endDeadline()
            mode = .streaming(messages: handler)
            watch(.readable)
            opened(.success(status))
            // Messages that came with the head wake no readiness: read now, if still open.
            if case .streaming = mode { readStream(handler) }
        }
    }

    /// The exchange under way ended with `result`: its completion is called and the next
    /// one starts.
    private func finish(_ result: Result<HTTPConnection.Response, HTTPFailure>) {
        endDeadline()
        switch mode {
        case .requests(var exchanges):
            guard !exchanges.isEmpty else { return }
            let exchange = exchanges.removeFirst()
            mode = .requests(exchanges)
            unwatch()
            // A request sent from the completion waits for `startNext`, which keeps the order.
            completing = true
            exchange.completion(result)
            completing = false
            startNext()
        case .opening(let opened, _):
            mode = .requests([])
            http.close()
            switch result {
            case .failure(let failure): opened(.failure(failure))
            case .success: opened(.failure(.malformed("an answer where a stream was expected")))
            }
        case .streaming:
            break
        }
    }

    private func readStream(_ handler: (Result<[[UInt8]], HTTPFailure>) -> Void) {
        do throws(HTTPFailure) {
            let messages = try http.nextMessages()
            if !messages.isEmpty { handler(.success(messages)) }
        } catch {
            mode = .requests([])
            handler(.failure(error))
        }
    }

    private func timedOut() {
        deadline = nil
        http.close()
        switch mode {
        case .requests: finish(.failure(.timedOut))
        case .opening(let opened, _):
            mode = .requests([])
            opened(.failure(.timedOut))
        case .streaming: break
        }
    }

    // MARK: The loop's sources

    /// Watches the socket for `events` (a source made anew when they change).
    private func watch(_ events: DescriptorEvents) {
        guard let descriptor = http.descriptor else { return finish(.failure(.broken("not connected"))) }
        if let source, source.isValid, source.descriptor == descriptor, watched == events { return }
        unwatch()
        let made = DescriptorSource(descriptor: descriptor, events: events) { [weak self] _, _ in self?.advance() }
        do { try loop.add(made, forMode: .common) } catch {
            http.close()
            return finish(.failure(.broken("the loop refused the connection's source: \(error)")))
        }
        source = made
        watched = events
    }

    private func unwatch() {
        source?.invalidate()
        source = nil
        watched = []
    }

    private func startDeadline() {
        endDeadline()
        let timer = LoopTimer(after: timeout) { [weak self] _ in self?.timedOut() }
        try? loop.add(timer, forMode: .common)
        deadline = timer
    }

    private func endDeadline() {
        deadline?.invalidate()
        deadline = nil
    }
}
