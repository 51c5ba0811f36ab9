import NamedPortServer

/// The arguments after the verb, with its options taken out.
struct Options {
    var positional: [String] = []
    var values: [String: String] = [:]
    /// The values of options that may be given more than once, in order.
    var repeated: [String: [String]] = [:]
    var flags: Set<String> = []

    /// Splits `arguments`; `valued` options take the next argument (`repeatable` ones may
    /// come more than once), `flags` take none. `--help` and `-h` are flags of every verb.
    init(
        _ arguments: [String], verb: Verb, valued: Set<String> = [], repeatable: Set<String> = [], flags known: Set<String> = []
    ) throws(Exit) {
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            if valued.contains(argument) || repeatable.contains(argument) {
                guard let value = rest.popFirst() else { throw .usage("\(argument) needs a value", verb: verb) }
                values[argument] = value
                if repeatable.contains(argument) { repeated[argument, default: []].append(value) }
            } else if known.contains(argument) || argument == "--help" || argument == "-h" {
                flags.insert(argument == "-h" ? "--help" : argument)
            } else if argument == "--" {
                positional += rest
                break
            } else if argument.hasPrefix("--") {
                throw .usage("unknown option '\(argument)'", verb: verb)
            } else {
                positional.append(argument)
            }
        }
    }

    var wantsHelp: Bool { flags.contains("--help") }
    var wantsJSON: Bool { flags.contains("--json") }

    /// The most seconds a time option takes: one day, the name server's cap on a wait
    /// (and far beyond any useful time-out), so every value converts without overflow.
    static let maxSeconds: Double = 86_400

    /// The value of a time option in seconds (`nil` when it is not given): a number from 0
    /// to `maxSeconds`, else a usage error.
    func seconds(_ option: String, verb: Verb) throws(Exit) -> Duration? {
        guard let text = values[option] else { return nil }
        guard let value = Double(text), value >= 0, value.isFinite else {
            throw .usage("\(option) needs a number of seconds, not '\(text)'", verb: verb)
        }
        guard value <= Self.maxSeconds else {
            throw .usage("\(option) takes at most \(Int(Self.maxSeconds)) seconds (one day), not '\(text)'", verb: verb)
        }
        return .milliseconds(Int64((value * 1000).rounded()))
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

/// Connects to the server at `address` (the default address if `nil`).
func connect(_ address: String?, reconnectingOn loop: ThreadLoop? = nil) throws(Exit) -> NameServerClient {
    do {
        return try NameServerClient.blockingConnect(to: address, timeout: .seconds(10), reconnectingOn: loop)
    } catch {
        throw Exit(error)
    }
}
