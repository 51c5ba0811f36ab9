import Foundation
import NamedPortServer
import PermanentThread
import PortMessaging
import PortKitTestSupport
import PortKitLocks

// Name-server scenarios: the processes the NamedPortServerTests start, kill and watch.
// Each prints what happened as lines on stdout (flushed at once) and, where the test
// must steer it, reads commands on stdin.

/// `names-server ADDRESS [--open] [--allow-all] [--max-names N] [--max-connections N] [--nofile N]`:
/// runs a name server in this process. Prints "listening on ADDRESS". Then, per line on
/// stdin: "fds" → "fds N" (open descriptors of this process); "counts" → "counts
/// connections=N names=N waiting=N watches=N"; "stop" → stops the server and prints
/// "stopped fds N". Ends at stdin's end.
/// `--open` makes the socket file 0666 (the policy still admits only this uid, unless
/// `--allow-all`);
/// `--max-names` and `--max-connections` set those limits of the policy; `--nofile`
/// sets this process's descriptor limit (RLIMIT_NOFILE) before the server starts.
@Sendable func namesServer(_ arguments: [String]) -> Int32 {
    guard let address = arguments.first else {
        return usage("names-server ADDRESS [--open] [--allow-all] [--max-names N] [--max-connections N] [--nofile N]")
    }
    var policy = NameServerPolicy()
    if arguments.contains("--open") { policy.socketPermissions = 0o666 }
    if arguments.contains("--allow-all") { policy.allowedUsers = nil }
    if let names = integerOption("--max-names", arguments) { policy.maxNamesPerConnection = names }
    if let connections = integerOption("--max-connections", arguments) { policy.maxConnections = connections }
    if let limit = integerOption("--nofile", arguments), !setDescriptorLimit(limit) {
        say("error setrlimit \(limit): \(errno)")
        return 1
    }
    let server: NameServer
    do {
        server = try NameServer.start(at: address, policy: policy)
    } catch {
        say("error \(error)")
        return 1
    }
    say("listening on \(server.address)")
    while let line = readLine() {
        switch line {
        case "fds": say("fds \(openDescriptorCount())")
        case "counts":
            if let counts = try? server.counts() {
                say("counts connections=\(counts.connections) names=\(counts.names) waiting=\(counts.waitingLookups) watches=\(counts.watches)")
            } else {
                say("counts unavailable")
            }
        case "stop":
            server.stop()
            say("stopped fds \(openDescriptorCount())")
        default: say("unknown command \(line)")
        }
    }
    server.stop()
    return 0
}

/// `names-owner ADDRESS NAME [--embedded] [--slow] [--die] [--cluster]`: registers NAME
/// with a port that answers each request with "PID TEXT" (this process's pid and the
/// request's text) and serves until killed. Prints "serving NAME PID". `--embedded`: if no
/// server answers at ADDRESS, start one in this process first. `--slow`: the handler takes
/// 20 s to answer. `--die`: the handler ends the process instead of answering.
/// `--cluster`: the name is registered with cluster scope.
@Sendable func namesOwner(_ arguments: [String]) -> Int32 {
    guard arguments.count >= 2 else { return usage("names-owner ADDRESS NAME [--embedded]") }
    let (address, name) = (arguments[0], arguments[1])
    let pid = getpid()
    let slow = arguments.contains("--slow"), die = arguments.contains("--die")
    do {
        let client = try NameServerClient.blockingConnect(
            to: address, startingServerIfNeeded: arguments.contains("--embedded"))
        let loop = ThreadLoop.current
        let port = ReceivePort()
        try port.schedule(on: loop) { request in
            if die { _exit(9) }
            if slow { usleep(20_000_000) }
            return Message(id: request.id, components: [.data(Array("\(pid) ".utf8) + request.bytes)], replyPort: nil)
        }
        try serveUntilKilled(client, name, port: port, scope: arguments.contains("--cluster") ? .cluster : .host, on: loop)
    } catch {
        say("error \(error)")
        return 1
    }
}

/// `names-request ADDRESS NAME TEXT WAIT_SECONDS`: looks NAME up (waiting up to
/// WAIT_SECONDS), sends TEXT as a request and prints "reply BYTES".
@Sendable func namesRequest(_ arguments: [String]) -> Int32 {
    guard arguments.count == 4, let wait = Double(arguments[3]) else {
        return usage("names-request ADDRESS NAME TEXT WAIT_SECONDS")
    }
    do {
        let client = try NameServerClient.blockingConnect(to: arguments[0])
        let port = try client.blockingLookup(arguments[1], waitingUpTo: .milliseconds(Int64(wait * 1000)))
        let reply = try port.blockingRequest(
            Message(id: 7, components: [.data(Array(arguments[2].utf8))], replyPort: nil),
            sendTimeout: .seconds(30), receiveTimeout: .seconds(30))
        say("reply \(String(decoding: reply.bytes, as: UTF8.self))")
        port.invalidate()
        client.close()
        return 0
    } catch {
        say("error \(error)")
        return 1
    }
}

/// `names-churn ADDRESS PREFIX MAX`: on one connection registers PREFIX0 and prints
/// "churning"; then, until a line arrives on stdin (or MAX names were made), registers
/// PREFIXi and releases PREFIX(i-1) for i = 1, 2, …; finally releases the last and prints
/// "done N", N being how many names it made (PREFIX0 to PREFIX(N-1)). Then waits for
/// stdin's end.
@Sendable func namesChurn(_ arguments: [String]) -> Int32 {
    guard arguments.count == 3, let maximum = Int(arguments[2]), maximum > 0 else {
        return usage("names-churn ADDRESS PREFIX MAX")
    }
    let prefix = arguments[1]
    do {
        let client = try NameServerClient.blockingConnect(to: arguments[0])
        let port = ReceivePort()
        try client.blockingRegister("\(prefix)0", port: port)
        say("churning")
        var made = 1
        while made < maximum && !standardInputIsReadable() {
            try client.blockingRegister("\(prefix)\(made)", port: port)
            try client.blockingUnregister("\(prefix)\(made - 1)")
            made += 1
        }
        try client.blockingUnregister("\(prefix)\(made - 1)")
        say("done \(made)")
        while readLine() != nil {}
        client.close()
        return 0
    } catch {
        say("error \(error)")
        return 1
    }
}

/// Whether a line (or the end) waits on stdin, without waiting for one.
private func standardInputIsReadable() -> Bool {
    var descriptor = pollfd(fd: 0, events: Int16(POLLIN), revents: 0)
    return poll(&descriptor, 1, 0) > 0
}

/// `names-stress ADDRESS COUNT`: COUNT threads, each with a connection of its own, at
/// the same time: register "stress.I"; once all have, look up "stress.(I+1)", send it a
/// request and check the answer names it; once all have, release the name. Prints
/// "registered", "requested", "released" as the phases complete, then "ok COUNT" or
/// "failed …".
@Sendable func namesStress(_ arguments: [String]) -> Int32 {
    guard arguments.count == 2, let count = Int(arguments[1]), count > 1 else {
        return usage("names-stress ADDRESS COUNT")
    }
    let address = arguments[0]
    let failures = Locked<[String]>([])
    let phases = ConditionLock<[Int]>([0, 0, 0])

    // Every port answers on one loop thread, with its own name.
    let portLoop = ConditionLock<ThreadLoop?>(nil)
    let loopThread = JoinableThread {
        let loop = ThreadLoop.current
        try? loop.add(LoopSource(perform: {}), forMode: .default)
        portLoop.withLock { $0 = loop }
        portLoop.broadcast()
        _ = try? loop.run()
    }
    let loop = portLoop.wait(until: nil) { $0 }!

    @Sendable func arrive(_ phase: Int) {
        let last = phases.withLock { phases -> Bool in
            phases[phase] += 1
            return phases[phase] == count
        }
        phases.broadcast()
        if last { say(["registered", "requested", "released"][phase]) }
        _ = phases.wait(until: .now + .seconds(120)) { $0[phase] == count ? true : nil }
    }

    let threads = (0..<count).map { index in
        JoinableThread {
            let name = "stress.\(index)"
            do {
                let client = try NameServerClient.blockingConnect(to: address, timeout: .seconds(60))
                let port = ReceivePort()
                try port.schedule(on: loop) { request in
                    Message(id: request.id, components: [.data(Array(name.utf8))], replyPort: nil)
                }
                try client.blockingRegister(name, port: port)
                arrive(0)
                let target = "stress.\((index + 1) % count)"
                let send = try client.blockingLookup(target, waitingUpTo: .seconds(60))
                let reply = try send.blockingRequest(
                    Message(id: UInt32(index), components: [.data(Array(name.utf8))], replyPort: nil),
                    sendTimeout: .seconds(60), receiveTimeout: .seconds(60))
                let answer = String(decoding: reply.bytes, as: UTF8.self)
                if answer != target { failures.withLock { $0.append("\(name) asked \(target), got '\(answer)'") } }
                send.invalidate()
                arrive(1)
                try client.blockingUnregister(name)
                arrive(2)
                client.close()
                port.invalidate()
            } catch {
                failures.withLock { $0.append("\(name): \(error)") }
                for phase in 0..<3 where phases.withLock({ $0[phase] }) < count { arrive(phase) }
            }
        }
    }
    for thread in threads { thread.join() }
    loop.stop()
    loopThread.join()
    let failed = failures.withLock { $0 }
    if failed.isEmpty {
        say("ok \(count)")
        return 0
    }
    say("failed \(failed.count): \(failed.prefix(5).joined(separator: "; "))")
    return 1
}

/// `names-try ADDRESS NAME [--trust UID]`: what a client may do: prints "connect: …",
/// then (if it connected) "register: …", "lookup: …", "list: …", each "ok" or the error's
/// case name. ADDRESS "-" is the default address; `--trust` names a trusted server user.
/// A refused server prints "connect: untrustedServer owner=UID address=PATH: DESCRIPTION".
@Sendable func namesTry(_ arguments: [String]) -> Int32 {
    guard arguments.count >= 2 else { return usage("names-try ADDRESS NAME [--trust UID]") }
    func caseName(_ error: NameServerError) -> String {
        switch error {
        case .permissionDenied: return "permissionDenied"
        case .notFound: return "notFound"
        case .serverUnavailable: return "serverUnavailable"
        case .serverBusy: return "serverBusy"
        case .untrustedServer(let address, let owner, _): return "untrustedServer owner=\(owner) address=\(address): \(error)"
        default: return "other(\(error))"
        }
    }
    let trusted = integerOption("--trust", arguments).map { Set([UInt32($0)]) } ?? []
    let client: NameServerClient
    do {
        client = try NameServerClient.blockingConnect(to: arguments[0] == "-" ? nil : arguments[0], trustedServerUsers: trusted)
    } catch {
        say("connect: \(caseName(error))")
        return 0
    }
    say("connect: ok")
    let port = ReceivePort()
    for (label, body) in [
        ("register", { () throws(NameServerError) in try client.blockingRegister(arguments[1], port: port) }),
        ("lookup", { () throws(NameServerError) in _ = try client.blockingOwner(of: arguments[1]) }),
        ("list", { () throws(NameServerError) in _ = try client.blockingList() }),
    ] as [(String, () throws(NameServerError) -> Void)] {
        do {
            try body()
            say("\(label): ok")
        } catch {
            say("\(label): \(caseName(error))")
        }
    }
    return 0
}

/// `names-squat ADDRESS COUNT`: opens COUNT plain connections to ADDRESS and sends
/// nothing; prints "connected COUNT" (or "error …"), then "closed K" once the server has
/// closed every one of them, or with the count so far after 60 s. Then waits for stdin's end.
@Sendable func namesSquat(_ arguments: [String]) -> Int32 {
    guard arguments.count == 2, let count = Int(arguments[1]) else { return usage("names-squat ADDRESS COUNT") }
    var sockets: [CInt] = []
    for _ in 0..<count {
        let socket = Glibc.socket(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(arguments[0].utf8).prefix(raw.count - 1))
        }
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard socket >= 0, connected == 0 else {
            say("error connect: \(errno)")
            return 1
        }
        sockets.append(socket)
    }
    say("connected \(count)")
    let deadline = ContinuousClock.now + .seconds(60)
    var open = Set(sockets)
    var scratch = [UInt8](repeating: 0, count: 4096)
    while !open.isEmpty && ContinuousClock.now < deadline {
        var polled = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        guard poll(&polled, nfds_t(polled.count), 1000) > 0 else { continue }
        for entry in polled where entry.revents != 0 {
            // Whatever the server said before closing (its notice) is read; the end closes.
            if read(entry.fd, &scratch, scratch.count) <= 0 { open.remove(entry.fd) }
        }
    }
    say("closed \(count - open.count)")
    while readLine() != nil {}
    for socket in sockets { close(socket) }
    return 0
}

/// `names-client-cycles ADDRESS --seconds S --minimum N`: for S seconds and at least N
/// cycles: connect, register a name, look it up, send a request through the brokered
/// connection (its reply must echo it), watch, list, close. Prints "cycles=N before=N
/// after=M": the cycles run and this process's open descriptors before and after.
@Sendable func namesClientCycles(_ arguments: [String]) -> Int32 {
    guard let address = arguments.first, let budget = StressBudget(arguments: Array(arguments.dropFirst())) else {
        return usage("names-client-cycles ADDRESS --seconds S --minimum N")
    }
    let portLoop = ConditionLock<ThreadLoop?>(nil)
    let loopThread = JoinableThread {
        let loop = ThreadLoop.current
        try? loop.add(LoopSource(perform: {}), forMode: .default)
        portLoop.withLock { $0 = loop }
        portLoop.broadcast()
        _ = try? loop.run()
    }
    let loop = portLoop.wait(until: nil) { $0 }!
    func cycle(_ index: Int) throws {
        let client = try NameServerClient.blockingConnect(to: address)
        let port = ReceivePort()
        try port.schedule(on: loop) { request in Message(id: request.id, components: [.data(request.bytes)], replyPort: nil) }
        try client.blockingRegister("cycle.\(index)", port: port)
        let send = try client.blockingLookup("cycle.\(index)")
        let reply = try send.blockingRequest(Message(id: 1, components: [.data([1, 2, 3])], replyPort: nil))
        guard reply.bytes == [1, 2, 3] else { throw CycleFailure(description: "cycle \(index): the reply was \(reply.bytes)") }
        let watch = try client.blockingWatch(prefix: "cycle.")
        guard try client.blockingList().contains(where: { $0.name == "cycle.\(index)" }) else {
            throw CycleFailure(description: "cycle \(index): the list lacks this cycle's name")
        }
        watch.cancel()
        send.invalidate()
        client.close()
        port.invalidate()
    }
    do {
        try cycle(0)  // warm up what the runtime opens once (the client I/O thread's loop)
        // Closing is asynchronous on the I/O thread: let the count settle.
        _ = settledDescriptorCount()
        let before = settledDescriptorCount()
        let cycles = try budget.run { index in try cycle(index + 1) }
        say("cycles=\(cycles) before=\(before) after=\(settledDescriptorCount(expecting: before))")
    } catch {
        say("error \(error)")
        return 1
    }
    loop.stop()
    loopThread.join()
    return 0
}

/// A cycle of a stress scenario that broke its invariant.
private struct CycleFailure: Error, CustomStringConvertible {
    var description: String
}

/// The open descriptor count once it stops changing (or equals `expecting`), within 10 s.
private func settledDescriptorCount(expecting: Int? = nil) -> Int {
    let deadline = ContinuousClock.now + .seconds(10)
    var last = openDescriptorCount()
    while ContinuousClock.now < deadline {
        if let expecting, last == expecting { return last }
        usleep(20_000)
        let now = openDescriptorCount()
        if now == last && expecting == nil { return now }
        last = now
    }
    return last
}

/// The integer after `name` in `arguments`, if there is one.
private func integerOption(_ name: String, _ arguments: [String]) -> Int? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return Int(arguments[index + 1])
}

/// Sets RLIMIT_NOFILE's soft limit to `limit`, raising the hard one if it is lower and
/// that is allowed, else stopping at the hard one.
private func setDescriptorLimit(_ limit: Int) -> Bool {
    let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    var value = rlimit()
    getrlimit(resource, &value)
    var raised = value
    raised.rlim_cur = rlim_t(limit)
    raised.rlim_max = max(value.rlim_max, rlim_t(limit))
    if setrlimit(resource, &raised) == 0 { return true }
    value.rlim_cur = min(rlim_t(limit), value.rlim_max)
    return setrlimit(resource, &value) == 0
}

/// Says how a scenario is called; the exit status of a usage error.
func usage(_ text: String) -> Int32 {
    say("usage: \(text)")
    return 2
}
