import PermanentThread
import PortMessaging
import Synchronization
import PortKitLocks

/// The answer to a connection's hello. A blocking `connect` sends the hello and does not
/// wait for it: the connection's first call goes out right behind it and, once its own
/// reply is in, takes the hello's answer too (a server answers a hello at once and serves
/// nothing on a connection before a good one, so that answer came first). A refused hello
/// is what that call, and every later one, throws.
///
/// ```
/// pending ──a caller takes the answer──▶ settling ──it came──▶ settled
///                                        settling ──not in time──▶ pending
/// ```
final class ServerGreeting: Sendable {
    private enum State {
        /// Sent, its answer not taken yet.
        case pending(SentRequest)
        /// A caller is waiting for the answer; others wait for that caller.
        case settling
        /// The server's pid, or why the hello failed.
        case settled(Result<Int32, NameServerError>)
    }

    private let state: ConditionLock<State>
    /// Whether the state is `settled` with the server's pid: read by every call, so an
    /// atomic (a call on a greeted connection takes no lock for the greeting).
    private let answeredOK = Atomic<Bool>(false)
    /// The pid of the process that made the listening socket (SO_PEERCRED): the server's,
    /// unless a service manager made it for the server (socket activation).
    let peerPID: Int32

    private init(_ state: State, peerPID: Int32) {
        self.state = ConditionLock(state)
        self.peerPID = peerPID
        if case .settled(.success) = state { answeredOK.store(true, ordering: .releasing) }
    }

    /// Whether the server answered the hello ok, and a call has taken that answer.
    var isGreeted: Bool { answeredOK.load(ordering: .acquiring) }

    /// A connection whose server answered its hello already, naming `pid`.
    static func greeted(pid: Int32) -> ServerGreeting {
        ServerGreeting(.settled(.success(pid)), peerPID: pid)
    }

    /// Sends the hello on `server`, whose listening socket `peerPID` made, and returns
    /// without waiting for its answer.
    /// - Throws: what a hello that could not be sent means (`serverBusy` when the server
    ///   closed at once, `transport(.sendTimedOut)` when its backlog stayed full).
    static func sayHello(on server: SendPort, peerPID: Int32, address: String, timeout: Duration) throws(NameServerError) -> ServerGreeting {
        let hello = NameServerClient.helloCall(address)
        do {
            let sent = try server.send(request: hello.message, sendTimeout: timeout)
            return ServerGreeting(.pending(sent), peerPID: peerPID)
        } catch {
            throw NameServerClient.helloError(error, address: address, serverPID: peerPID)
        }
    }

    /// The server's pid if its hello's answer was taken and was ok.
    var knownPID: Int32? {
        state.withLock { state in
            if case .settled(.success(let pid)) = state { return pid }
            return nil
        }
    }

    /// Why the hello failed, if its answer was taken and was a refusal.
    var failure: NameServerError? {
        state.withLock { state in
            if case .settled(.failure(let error)) = state { return error }
            return nil
        }
    }

    /// The server's pid, taking the hello's answer if no call has yet, waiting for it
    /// until `timeout` after the hello was sent (`.zero`: only if it is in).
    /// - Throws: the refusal (`protocolError`, `permissionDenied`, `serverBusy`), or
    ///   `transport(.receiveTimedOut)` when the answer did not come in time (a later call may take it still).
    func settle(timeout: Duration, address: String) throws(NameServerError) -> Int32 {
        /// What this caller does: return the answer, or take it.
        enum Turn {
            case answered(Result<Int32, NameServerError>)
            case take(SentRequest)
        }
        // The answer, or the caller's turn to take it, or (while another caller takes it)
        // a wait for that caller.
        let turn = state.wait(until: .now + timeout) { state -> Turn? in
            switch state {
            case .settled(let outcome): return .answered(outcome)
            case .settling: return nil
            case .pending(let sent):
                state = .settling
                return .take(sent)
            }
        }
        let sent: SentRequest
        switch turn {
        case .answered(let outcome)?: return try outcome.get()
        case .take(let request)?: sent = request
        case nil: throw .transport(.receiveTimedOut)
        }
        let outcome: Result<Int32, NameServerError>
        do {
            let reply = try sent.reply(timeout: timeout)
            outcome = Result { () throws(NameServerError) in
                try NameServerClient.greetedPID(try NameServerClient.okFields(of: reply, address: address))
            }
        } catch .receiveTimedOut {
            state.withLock { $0 = .pending(sent) }
            state.broadcast()
            throw .transport(.receiveTimedOut)
        } catch {
            outcome = .failure(NameServerClient.helloError(error, address: address, serverPID: peerPID))
        }
        state.withLock { $0 = .settled(outcome) }
        if case .success = outcome { answeredOK.store(true, ordering: .releasing) }
        state.broadcast()
        return try outcome.get()
    }
}

extension NameServerClient {
    /// The ok reply's fields of a call whose outcome is `reply`, once its connection's hello
    /// is known to have been answered ok; else the hello's refusal (which outranks what the
    /// call got: a server serves nothing before a good hello), or the error the call's
    /// failure or status stands for.
    static func answered(
        _ reply: Result<Message, PortError>, greeting: ServerGreeting, address: String, timeout: Duration,
        what: @autoclosure () -> String
    ) throws(NameServerError) -> NameFieldReader {
        if !greeting.isGreeted {
            try takeGreeting(after: reply, greeting, address: address, timeout: timeout, what: what())
        }
        switch reply {
        case .success(let message): return try okFields(of: message, address: address)
        case .failure(let failure): throw requestError(failure, address: address, what: what())
        }
    }

    /// Takes the hello's answer after a call's outcome `reply`; throws the hello's refusal,
    /// or when the hello's answer is not in, the call's own failure.
    private static func takeGreeting(
        after reply: Result<Message, PortError>, _ greeting: ServerGreeting, address: String, timeout: Duration, what: String
    ) throws(NameServerError) {
        do {
            // The hello's answer came before this reply: it is in, unless the call failed first.
            let arrived: Bool
            if case .success = reply { arrived = true } else { arrived = false }
            _ = try greeting.settle(timeout: arrived ? timeout : .zero, address: address)
        } catch {
            if case .success(let message) = reply { message.discardAttachments() }
            // No answer to the hello yet: the call's own failure says more.
            if case .transport(.receiveTimedOut) = error, case .failure(let failure) = reply { throw requestError(failure, address: address, what: what) }
            throw error
        }
    }
}
