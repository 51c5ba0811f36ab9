// portkit-bench: compares PortKit with baselines. The command is `BenchmarkCommand`
// (Harness/BenchmarkCommand.swift); the cases are listed in Harness/BenchmarkRegistry.swift.
import Glibc

exit(BenchmarkCommand.run(arguments: Array(CommandLine.arguments.dropFirst())))
