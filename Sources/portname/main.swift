// portname: the PortKit name server from the command line (docs/man/portname.1). Scripts
// rely on its output shapes and exit statuses; `portname --help` lists both.
import Glibc
import NamedPortServer

/// Runs one command line (without the program name).
func run(_ arguments: [String]) throws(Exit) {
    var arguments = arguments
    var address: String?
    // The global option may stand anywhere before a `--`.
    let end = arguments.firstIndex(of: "--") ?? arguments.endIndex
    if let index = arguments[..<end].firstIndex(of: "--address") {
        // Only an empty $PORTKIT_NAME_SERVER means the default: an empty flag is a slip.
        guard index + 1 < arguments.count, !arguments[index + 1].isEmpty else { throw .usage("--address needs a path") }
        address = arguments[index + 1]
        arguments.removeSubrange(index...index + 1)
    }
    guard let word = arguments.first else { throw .usage("a command is needed") }
    let rest = Array(arguments.dropFirst())

    switch word {
    case "-h", "--help":
        return say(Help.general)
    case "help":
        guard let name = rest.first else { return say(Help.general) }
        guard let verb = Verb(rawValue: name) else { throw .usage("unknown command '\(name)'") }
        return say(Help.verb(verb))
    case "--version", "version":
        return say(Help.version)
    default:
        break
    }
    guard let verb = Verb(rawValue: word) else { throw .usage("unknown command '\(word)'") }

    let options: Options
    switch verb {
    case .list: options = try Options(rest, verb: verb, valued: ["--cluster", "--tls-cert", "--tls-key", "--tls-ca"], flags: ["--json", "--activatable"])
    case .status: options = try Options(rest, verb: verb, flags: ["--json"])
    case .monitor: options = try Options(rest, verb: verb, flags: ["--json"])
    case .call:
        options = try Options(
            rest, verb: verb, valued: ["--id", "--text", "--bytes", "--timeout"], repeatable: ["--fd"], flags: ["--oneway", "--json"])
    case .lookup: options = try Options(rest, verb: verb, valued: ["--wait"], flags: ["--json"])
    case .watch: options = try Options(rest, verb: verb, flags: ["--json"])
    case .serve: options = try Options(rest, verb: verb, flags: ["--echo", "--cluster", "--json", "--queue", "--replaceable", "--replace"])
    case .send: options = try Options(rest, verb: verb, valued: ["--id", "--timeout"], flags: ["--json"])
    }
    if options.wantsHelp { return say(Help.verb(verb)) }

    switch verb {
    case .list: try QueryCommands.list(options, address: address)
    case .lookup: try QueryCommands.lookup(options, address: address)
    case .status where !options.positional.isEmpty: try StatusCommand.run(options, address: address)
    case .status: try QueryCommands.status(options, address: address)
    case .watch: try WatchCommand.run(options, address: address)
    case .serve: try PortCommands.serve(options, address: address)
    case .send: try CallCommand.send(options, address: address)
    case .call: try CallCommand.run(options, address: address)
    case .monitor: try MonitorCommand.run(options, address: address)
    }
}

/// The arguments as given (without the program name). `CommandLine.arguments` would
/// replace bytes that are not UTF-8 with U+FFFD, so that `caf\xe9` and `caf\xe8` became one
/// name: such an argument is refused instead (names are UTF-8 only).
func checkedArguments() throws(Exit) -> [String] {
    var arguments: [String] = []
    for index in 1..<Int(CommandLine.argc) {
        guard let raw = CommandLine.unsafeArgv[index] else { continue }
        guard let argument = String(validatingCString: raw) else {
            let escaped = UnsafeRawBufferPointer(start: raw, count: strlen(raw)).map { byte in
                byte < 0x80 ? String(UnicodeScalar(byte)) : "\\x" + String(byte, radix: 16)
            }.joined()
            throw Exit(status: 2, message: "invalid name or argument '\(escaped)': not UTF-8 (names are UTF-8 only)")
        }
        arguments.append(argument)
    }
    return arguments
}

do {
    try run(try checkedArguments())
    exit(0)
} catch {
    if let message = error.message { sayError(message) }
    exit(error.status)
}
