import Glibc
import NamedPortServer

/// `serve`: a named port from the shell (`call` and `send` are CallCommand's).
enum PortCommands {
    static func serve(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.count == 1 else { throw .usage("serve takes one NAME", verb: .serve) }
        let name = try validName(options.positional[0])
        let echo = options.flags.contains("--echo")
        let scope: NameScope = options.flags.contains("--cluster") ? .cluster : .host
        let ifTaken = try takenNamePolicy(options)
        let loop = ThreadLoop.current
        // The loop that serves the port also watches the server: across a restart of the
        // server the name is registered again.
        let client = try connect(address, reconnectingOn: loop)
        let port = ReceivePort()
        do {
            try port.schedule(on: loop) { request in
                Message(id: request.id, components: [.data(echo ? request.bytes : [])], replyPort: nil)
            }
        } catch {
            throw Exit(status: 1, message: "cannot receive requests: \(error)")
        }
        let registration: NameRegistration
        do {
            registration = try client.blockingRegister(
                name, port: port, scope: scope, ifTaken: ifTaken, replaceable: options.flags.contains("--replaceable"))
        } catch {
            throw Exit(error)
        }
        let json = options.wantsJSON
        registration.onStateChange(on: loop) { state in
            switch state {
            case .serverLost:
                if json { say(servingLine("server_lost", name: name)) }
                sayError("the name server at \(client.address) went away; reconnecting")
            case .registeredAgain:
                if json { say(servingLine("serving_again", name: name, pid: Int(getpid()), serverPID: Int(client.serverPID))) }
                sayError("serving \(name) again (name server pid \(client.serverPID))")
            case .registered:
                // A standby that took the name over.
                say(json ? servingLine("serving", name: name, pid: Int(getpid())) : "serving \(name)")
            case .queued:
                if json { say(servingLine("queued", name: name, pid: Int(getpid()))) }
            case .takenByAnother(let pid):
                sayError("'\(name)' was taken by process \(pid)")
                exit(1)
            case .failed(let error):
                sayError("cannot register '\(name)' again: \(error)")
                exit(1)
            case .released: break
            }
        }
        // Said once the handler is in place, so that a standby's takeover is said too.
        if registration.state == .queued {
            say(json ? servingLine("queued", name: name, pid: Int(getpid())) : "queued for \(name)")
        } else {
            say(json ? servingLine("serving", name: name, pid: Int(getpid())) : "serving \(name)")
        }
        // Nothing signals this source: it keeps the run going whatever the port does.
        try? loop.add(LoopSource(perform: {}), forMode: .default)
        withExtendedLifetime(client) {
            while true {
                do throws(ThreadLoopError) {
                    try loop.run()
                } catch {
                    sayError("serve: the run loop failed: \(error)")
                    exit(1)
                }
            }
        }
    }

    /// A `serve --json` line: `{"event": EVENT, "name": NAME}`, then `"pid"` (this
    /// process) and `"server_pid"` when given.
    private static func servingLine(_ event: String, name: String, pid: Int? = nil, serverPID: Int? = nil) -> String {
        var line = JSONLine()
        line.add("event", event)
        line.add("name", name)
        if let pid { line.add("pid", pid) }
        if let serverPID { line.add("server_pid", serverPID) }
        return line.text
    }
}

/// What `serve` does when the name is taken: `--queue` waits behind its owner, `--replace`
/// takes it from an owner that allowed it; fail otherwise.
private func takenNamePolicy(_ options: Options) throws(Exit) -> TakenNamePolicy {
    switch (options.flags.contains("--queue"), options.flags.contains("--replace")) {
    case (true, true): throw .usage("--queue and --replace exclude each other", verb: .serve)
    case (true, false): return .queue
    case (false, true): return .replace
    case (false, false): return .fail
    }
}
