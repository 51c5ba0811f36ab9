// portname: the PortKit name server from the command line. Scripts rely on the output
// shapes and exit statuses below.
//
//   portname [--address PATH] list                      NAME<TAB>PID<TAB>UID per name
//   portname [--address PATH] lookup NAME [--wait S]    the owner's pid
//   portname [--address PATH] watch [PREFIX]            "+ NAME PID" / "- NAME PID" lines
//   portname [--address PATH] serve NAME [--echo]       "serving NAME", then serves until killed
//   portname [--address PATH] send NAME [--id N] [--timeout S] [TEXT]
//                                                       the reply's bytes as text
//
// Exit status: 0 success; 1 not found (or another refusal: name taken, permission
// denied); 2 usage error (an invalid name included); 3 timed out; 4 the peer died;
// 5 no name server answers at the address.
import Glibc
import NamedPortServer

let usageText = """
    usage: portname [--address PATH] list
           portname [--address PATH] lookup NAME [--wait SECONDS]
           portname [--address PATH] watch [PREFIX]
           portname [--address PATH] serve NAME [--echo]
           portname [--address PATH] send NAME [--id N] [--timeout SECONDS] [TEXT]
    """

/// What ends the command: an exit status and a line for the standard error.
struct Exit: Error {
    var status: Int32
    var message: String?

    static func usage(_ message: String) -> Exit { Exit(status: 2, message: "\(message)\n\(usageText)") }

    init(status: Int32, message: String?) {
        self.status = status
        self.message = message
    }

    init(_ error: NameServerError) {
        switch error {
        case .notFound, .nameTaken, .notOwner, .permissionDenied, .limitExceeded: status = 1
        case .invalidName: status = 2
        case .timedOut: status = 3
        case .serverUnavailable: status = 5
        case .connectionLost: status = 5
        case .addressInUse, .protocolError, .system: status = 1
        }
        message = "\(error)"
    }

    init(_ error: PortError, name: String) {
        switch error {
        case .sendTimedOut, .receiveTimedOut:
            self.init(status: 3, message: "timed out waiting for '\(name)'")
        case .peerDied, .invalidPort:
            self.init(status: 4, message: "the owner of '\(name)' died")
        default:
            self.init(status: 1, message: "sending to '\(name)' failed: \(error)")
        }
    }
}

/// Writes a line to the standard output and flushes it, so a reader sees it at once.
func say(_ line: String) {
    print(line)
    fflush(nil)
}

func sayError(_ message: String) {
    let line = "portname: \(message)\n"
    _ = line.utf8CString.withUnsafeBufferPointer { write(STDERR_FILENO, $0.baseAddress, $0.count - 1) }
}

/// The arguments after the command, with its options taken out.
struct Options {
    var positional: [String] = []
    var values: [String: String] = [:]
    var flags: Set<String> = []

    /// Splits `arguments`; `valued` options take the next argument, `flags` take none.
    init(_ arguments: [String], valued: Set<String> = [], flags known: Set<String> = []) throws(Exit) {
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            if valued.contains(argument) {
                guard let value = rest.popFirst() else { throw .usage("\(argument) needs a value") }
                values[argument] = value
            } else if known.contains(argument) {
                flags.insert(argument)
            } else if argument == "--" {
                positional += rest
                break
            } else if argument.hasPrefix("--") {
                throw .usage("unknown option '\(argument)'")
            } else {
                positional.append(argument)
            }
        }
    }

    func seconds(_ option: String) throws(Exit) -> Duration? {
        guard let text = values[option] else { return nil }
        guard let value = Double(text), value >= 0, value.isFinite else {
            throw .usage("\(option) needs a number of seconds, not '\(text)'")
        }
        return .milliseconds(Int64((value * 1000).rounded()))
    }
}

func connect(_ address: String?) throws(Exit) -> NameServerClient {
    do {
        return try NameServerClient.connect(to: address, timeout: .seconds(10))
    } catch {
        throw Exit(error)
    }
}

/// The name, checked before any connection is made (an invalid one is a usage error).
func validName(_ name: String) throws(Exit) -> String {
    do {
        try NameRules.validate(name)
    } catch {
        throw Exit(error)
    }
    return name
}

func run(_ arguments: [String]) throws(Exit) {
    var arguments = arguments
    var address: String?
    if let index = arguments.firstIndex(of: "--address") {
        guard index + 1 < arguments.count else { throw .usage("--address needs a path") }
        address = arguments[index + 1]
        arguments.removeSubrange(index...index + 1)
    }
    guard let command = arguments.first else { throw .usage("a command is needed") }
    let rest = Array(arguments.dropFirst())

    switch command {
    case "list":
        let options = try Options(rest)
        guard options.positional.isEmpty else { throw .usage("list takes no arguments") }
        let client = try connect(address)
        do {
            for owner in try client.list() { say("\(owner.name)\t\(owner.pid)\t\(owner.uid)") }
        } catch {
            throw Exit(error)
        }

    case "lookup":
        let options = try Options(rest, valued: ["--wait"])
        guard options.positional.count == 1 else { throw .usage("lookup takes one NAME") }
        let wait = try options.seconds("--wait")
        let name = try validName(options.positional[0])
        let client = try connect(address)
        do {
            say("\(try client.owner(of: name, waitingUpTo: wait).pid)")
        } catch .timedOut {
            // For a script, a name that did not come in time is a name not found.
            throw Exit(status: 1, message: "no port was registered as '\(name)' within \(wait ?? .zero)")
        } catch {
            throw Exit(error)
        }

    case "watch":
        let options = try Options(rest)
        guard options.positional.count <= 1 else { throw .usage("watch takes at most one PREFIX") }
        let prefix = options.positional.first ?? ""
        do {
            try NameRules.validatePrefix(prefix)
        } catch {
            throw Exit(error)
        }
        let client = try connect(address)
        do {
            let watch = try client.watch(prefix: prefix)
            for owner in watch.initialOwners { say("+ \(owner.name) \(owner.pid)") }
            while let event = try watch.next() { say(event.description) }
        } catch {
            throw Exit(error)
        }

    case "serve":
        let options = try Options(rest, flags: ["--echo"])
        guard options.positional.count == 1 else { throw .usage("serve takes one NAME") }
        try serve(try validName(options.positional[0]), echo: options.flags.contains("--echo"), address: address)

    case "send":
        let options = try Options(rest, valued: ["--id", "--timeout"])
        guard (1...2).contains(options.positional.count) else { throw .usage("send takes NAME and at most one TEXT") }
        let id = try options.values["--id"].map { (text) throws(Exit) -> UInt32 in
            guard let id = UInt32(text) else { throw .usage("--id needs a number from 0 to \(UInt32.max)") }
            return id
        } ?? 0
        let timeout = try options.seconds("--timeout") ?? .seconds(10)
        let name = try validName(options.positional[0])
        let text = options.positional.count > 1 ? options.positional[1] : ""
        let client = try connect(address)
        let port: SendPort
        do {
            port = try client.lookup(name)
        } catch {
            throw Exit(error)
        }
        do {
            let request = Message(id: id, components: [.data(Array(text.utf8))], replyPort: nil)
            let reply = try port.sendRequest(request, sendTimeout: timeout, receiveTimeout: timeout)
            say(String(decoding: reply.bytes, as: UTF8.self))
        } catch {
            throw Exit(error, name: name)
        }
        port.invalidate()

    case "-h", "--help", "help":
        say(usageText)

    default:
        throw .usage("unknown command '\(command)'")
    }
}

/// Registers `name` with a port on this thread's loop and serves it until killed.
func serve(_ name: String, echo: Bool, address: String?) throws(Exit) {
    let client = try connect(address)
    let loop = ThreadLoop.current
    let port = ReceivePort()
    do {
        try port.schedule(on: loop) { request in
            Message(id: request.id, components: [.data(echo ? request.bytes : [])], replyPort: nil)
        }
    } catch {
        throw Exit(status: 1, message: "cannot schedule a port: \(error)")
    }
    do {
        try client.register(name, port: port)
    } catch {
        throw Exit(error)
    }
    say("serving \(name)")
    // Nothing signals this source: it keeps the run going whatever the port does.
    try? loop.add(LoopSource(perform: {}), forMode: .default)
    withExtendedLifetime(client) {
        while true { _ = try? loop.run() }
    }
}

do {
    try run(Array(CommandLine.arguments.dropFirst()))
    exit(0)
} catch {
    if let message = error.message { sayError(message) }
    exit(error.status)
}
