/// The command line of portkit-bench.
struct BenchmarkOptions: Equatable {
    /// One JSON object per line instead of a table.
    var json = false
    /// Only cases whose name contains this.
    var filter: String?
    /// Only the impls of those cases with exactly these names (to profile one side).
    var impls: [String] = []
    /// Measured runs per impl; `nil` for the default.
    var runs: Int?
    /// A fast smoke run: fewer iterations per run and fewer runs.
    var quick = false
    /// List the case names and exit.
    var list = false
    /// Print the usage and exit.
    var help = false
    /// Hidden: run as a benchmark's child process (`--child NAME [ARGS...]`), the name and
    /// its arguments; everything after `--child` belongs to the child.
    var child: [String]?

    /// Runs per impl unless `--runs` says otherwise.
    static let defaultRuns = 10
    /// Runs per impl with `--quick` unless `--runs` says otherwise.
    static let defaultQuickRuns = 3

    /// The measured runs per impl this command asks for.
    var effectiveRuns: Int { runs ?? (quick ? Self.defaultQuickRuns : Self.defaultRuns) }

    static let usage = """
        usage: portkit-bench [--json] [--filter SUBSTRING] [--impl NAME]... [--runs N] [--quick] [--list] [--help]

        Runs each benchmark case's implementations alternately in this process (after one
        warm-up run each) and prints median, min and max of the per-run samples.

          --json              one JSON object per line:
                              {"bench": ..., "impl": ..., "unit": ..., "median": x, "min": x, "max": x, "runs": n}
                              (a scale case's rows also carry "size": n)
          --filter SUBSTRING  run only the cases whose name contains SUBSTRING
          --impl NAME         run only the implementations named NAME (repeatable): to
                              profile one side under callgrind or perf
          --runs N            measured runs per implementation (default \(defaultRuns), \(defaultQuickRuns) with --quick)
          --quick             smoke run: few iterations per run, to check the harness works
          --list              print the case names and exit
          --help              print this and exit

        In the table, portkit/IMPL is portkit's median divided by IMPL's: for a time, below 1
        means portkit took less; for a rate (a unit ending in /s), above 1 means portkit did more.
        In a scale case (scale.*), whose impls are sizes, the column is each size's median
        divided by the smallest size's of the same series (the impl without its size), as
        1.05x/10.
        """

    /// Parses the arguments (without the program name).
    /// - Throws: `OptionsError` for an unknown option, a missing or bad value.
    static func parse(_ arguments: [String]) throws(OptionsError) -> BenchmarkOptions {
        var options = BenchmarkOptions()
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            // Accept both `--name value` and `--name=value`.
            var name = argument
            var inlineValue: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            func value() throws(OptionsError) -> String {
                if let inlineValue { return inlineValue }
                guard let next = rest.popFirst() else { throw .missingValue(name) }
                return next
            }
            switch name {
            case "--json": options.json = true
            case "--quick": options.quick = true
            case "--list": options.list = true
            case "--help", "-h": options.help = true
            case "--filter": options.filter = try value()
            case "--impl": options.impls.append(try value())
            case "--child":
                options.child = [try value()] + rest
                rest = []
            case "--runs":
                let text = try value()
                guard let runs = Int(text), runs > 0 else { throw .badValue(name, text) }
                options.runs = runs
            default: throw .unknown(argument)
            }
        }
        return options
    }
}

/// A command line portkit-bench does not understand.
enum OptionsError: Error, Equatable, CustomStringConvertible {
    case unknown(String)
    case missingValue(String)
    case badValue(String, String)

    var description: String {
        switch self {
        case .unknown(let argument): "unknown argument '\(argument)'"
        case .missingValue(let option): "\(option) needs a value"
        case .badValue(let option, let value): "\(option): '\(value)' is not a positive integer"
        }
    }
}
