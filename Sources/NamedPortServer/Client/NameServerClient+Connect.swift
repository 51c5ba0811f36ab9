import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem
import PortKitLocks

/// Connecting: the tries `connect` makes, and those a reconnection makes.
extension NameServerClient {
    /// A connection to the server at `address`, made as `connect` says (waiting for the
    /// hello's answer if `awaitingHello`).
    static func connection(
        _ address: String, timeout: Duration, startingServerIfNeeded: Bool, trustedServerUsers: Set<UInt32>,
        waitingForServer: Duration?, awaitingHello: Bool
    ) throws(NameServerError) -> ServerConnection {
        if waitingForServer != .zero, !startingServerIfNeeded {
            // `nil`: as long as it takes (a year stands for that).
            let until = ContinuousClock.now + (waitingForServer ?? .seconds(365 * 86_400))
            return try connectWaiting(address, until: until, timeout: timeout, trustedServerUsers, awaitingHello: awaitingHello)
        }
        do {
            return try connectOnce(address, timeout: timeout, trustedServerUsers, awaitingHello: awaitingHello)
        } catch {
            guard case .serverUnavailable = error, startingServerIfNeeded else { throw error }
        }
        do {
            _ = try NameServer.embedded(at: address)
        } catch {
            // Another process started one at the same moment: use that one.
            guard case .serverAlreadyRunning = error else { throw error }
        }
        return try connectOnce(address, timeout: timeout, trustedServerUsers, awaitingHello: awaitingHello)
    }

    /// Connects, and while no server answers, waits for a change in the address's
    /// directory (or, while that is missing, in its parent) and tries again, until
    /// `deadline`. The watch is made before each try, so a server that appears between a
    /// failed try and the wait is not missed.
    static func connectWaiting(
        _ address: String, until deadline: ContinuousClock.Instant, timeout: Duration, _ trustedServerUsers: Set<UInt32>,
        awaitingHello: Bool
    ) throws(NameServerError) -> ServerConnection {
        let directory = NameServerAddress.directory(of: address)
        while true {
            let watch = (try? DirectoryWatch(directory)) ?? (try? DirectoryWatch(NameServerAddress.directory(of: directory)))
            defer { watch?.close() }
            do {
                return try connectOnce(address, timeout: timeout, trustedServerUsers, awaitingHello: awaitingHello)
            } catch .serverUnavailable(let address, let reason) {
                guard ContinuousClock.now < deadline else { throw .serverUnavailable(address: address, reason: reason) }
            }
            // A socket file appears at bind and is listened on a moment later: a try that
            // finds it refused waits for the next change, but never long.
            let until = min(deadline, .now + .milliseconds(250))
            if let watch {
                _ = try? watch.waitForChange(until: until)
            } else {
                // Neither the directory nor its parent exists yet: nothing to watch.
                _ = ConditionLock(false).wait(until: until) { _ in nil as Void? }
            }
        }
    }

    /// Connects, checks whom, and says hello: one try. With `awaitingHello` it waits for
    /// the hello's answer (and throws a refusal); without, the first call takes it
    /// (`ServerGreeting`).
    static func connectOnce(
        _ address: String, timeout: Duration, _ trustedServerUsers: Set<UInt32>, awaitingHello: Bool
    ) throws(NameServerError) -> ServerConnection {
        let (server, peerPID) = try trustedPort(address, timeout: timeout, trustedServerUsers)
        do throws(NameServerError) {
            let greeting = try ServerGreeting.sayHello(on: server, peerPID: peerPID, address: address, timeout: timeout)
            if awaitingHello { _ = try greeting.settle(timeout: timeout, address: address) }
            return ServerConnection(port: server, greeting: greeting)
        } catch {
            server.invalidate()
            throw error
        }
    }

    /// A connection to the server at `address` whose listener is trusted, checked before a
    /// byte is sent, and the pid of the process that made the listening socket.
    static func trustedPort(
        _ address: String, timeout: Duration, _ trustedServerUsers: Set<UInt32>
    ) throws(NameServerError) -> (SendPort, peerPID: Int32) {
        let trust = ServerTrust(address: address, trustedUsers: trustedServerUsers)
        try trust.checkDirectory()
        let server: SendPort
        do {
            server = try SendPort.connect(to: .path(address), timeout: timeout)
        } catch {
            throw Self.connectError(error, address: address)
        }
        do throws(NameServerError) {
            guard let credentials = server.remoteCredentials else { throw .connectionLost(address: address) }
            try trust.checkServer(uid: UInt32(credentials.uid))
            return (server, credentials.pid)
        } catch {
            server.invalidate()
            throw error
        }
    }

    /// The hello every connection begins with.
    static func helloCall(_ address: String) -> NameCall {
        NameCall(
            operation: .hello, fields: [NameField.integer(nameProtocolVersion)],
            what: "the name server at \(address) to say hello")
    }

    /// What a failed hello means: a server answers every hello it reads; one that closes
    /// first could not take the connection at all (busy), unless it is gone: a server that
    /// died before answering is exiting or dead (`serverPID`, the process that made the
    /// listening socket), or leaves a socket nobody accepts on (or none), and the
    /// connection is lost, as with any server that went away.
    static func helloError(_ failure: PortError, address: String, serverPID: Int32) -> NameServerError {
        let error = requestError(failure, address: address, what: helloCall(address).what)
        guard case .connectionLost = error else { return error }
        // A dying server releases its connections before its listening socket: its
        // process says it is going while the socket may still look live.
        if ProcessLiveness.isGone(serverPID) { return error }
        switch try? UnixSocket.probe(address) {
        case .stale?, .free?: return error
        case .live?, .notASocket?, nil:
            return .serverBusy(address: address, reason: "it closed the connection before answering (out of descriptors?)")
        }
    }

    /// The server's pid, from an ok answer to its hello.
    static func greetedPID(_ fields: NameFieldReader) throws(NameServerError) -> Int32 {
        var fields = fields
        let pid = try fields.pid()
        _ = try fields.uid()
        _ = try fields.integer()
        return pid
    }

    /// What a failed `SendPort.connect` means for a name server client.
    static func connectError(_ error: PortError, address: String) -> NameServerError {
        switch error {
        case .noListener:
            let reason = (try? FileSystem.status(address)) == nil ? "no socket file" : "connection refused: the server is gone"
            return .serverUnavailable(address: address, reason: reason)
        case .sendTimedOut: return .transport(error)
        case .system(let failure) where failure.errno == EACCES || failure.errno == EPERM:
            return .permissionDenied(reason: "cannot connect to \(address): \(Errno(rawValue: failure.errno))")
        case .system(let failure): return .serverUnavailable(address: address, reason: "\(failure.operation): \(Errno(rawValue: failure.errno))")
        default: return .serverUnavailable(address: address, reason: "\(error)")
        }
    }
}
