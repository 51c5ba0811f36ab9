import Glibc

/// The portkit-bench command: parses the options, selects the cases, runs and reports them.
enum BenchmarkCommand {
    /// Runs the command; returns the process exit status.
    static func run(arguments: [String]) -> Int32 {
        let options: BenchmarkOptions
        do {
            options = try BenchmarkOptions.parse(arguments)
        } catch {
            printError("portkit-bench: \(error)\n\(BenchmarkOptions.usage)")
            return 2
        }
        if let child = options.child {
            return BenchChildren.run(child)
        }
        if options.help {
            print(BenchmarkOptions.usage)
            return 0
        }

        let scale = BenchmarkScale(isQuick: options.quick)
        let cases = BenchmarkRegistry.cases(scale).filter { benchCase in
            options.filter.map { benchCase.name.contains($0) } ?? true
        }.map { benchCase in
            options.impls.isEmpty ? benchCase : benchCase.keeping(options.impls)
        }
        if options.list {
            for benchCase in cases { print(benchCase.name) }
            return 0
        }
        guard !cases.isEmpty else {
            printError("portkit-bench: no case matches '\(options.filter ?? "")'")
            return 1
        }

        let report: any BenchmarkReport = options.json ? JSONLinesReport() : TableReport()
        let runner = BenchmarkRunner(runs: options.effectiveRuns, warmUpRuns: 1)
        report.begin(cases, runs: runner.runs, quick: options.quick)
        var failed = false
        for benchCase in cases {
            do {
                report.report(try runner.run(benchCase))
            } catch {
                printError("portkit-bench: \(benchCase.name) failed: \(error)")
                failed = true
            }
        }
        return failed ? 1 : 0
    }
}

/// Writes one line to the standard error.
func printError(_ message: String) {
    // Through the descriptor: the C `stderr` global is not concurrency-safe in Swift 6.
    let line = message + "\n"
    _ = line.utf8CString.withUnsafeBufferPointer { write(STDERR_FILENO, $0.baseAddress, $0.count - 1) }
}
