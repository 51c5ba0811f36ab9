import Foundation

/// Where results go: a table for people, or JSON lines for tools.
protocol BenchmarkReport {
    /// Called once, before any case runs, with the cases that will run.
    func begin(_ cases: [BenchmarkCase], runs: Int, quick: Bool)
    /// Called once per case, with one result per impl, as soon as the case is done.
    func report(_ results: [BenchmarkResult])
}

/// One JSON object per line and per impl, flushed as each case ends:
/// `{"bench": "...", "impl": "...", "unit": "...", "median": x, "min": x, "max": x, "runs": n}`,
/// with `"size": n` after `"impl"` for an impl of a scale case, and `"p99": x` after `"max"`
/// for a case whose runs are timed exchanges (the median over the runs of each run's 99th
/// percentile).
struct JSONLinesReport: BenchmarkReport {
    func begin(_ cases: [BenchmarkCase], runs: Int, quick: Bool) {}

    func report(_ results: [BenchmarkResult]) {
        for result in results {
            let s = result.summary
            let size = result.size.map { "\"size\": \($0), " } ?? ""
            let p99 = result.p99.map { "\"p99\": \(Self.number($0)), " } ?? ""
            print("{\"bench\": \(Self.quoted(result.bench)), \"impl\": \(Self.quoted(result.impl)), " + size
                + "\"unit\": \(Self.quoted(result.unit)), \"median\": \(Self.number(s.median)), "
                + "\"min\": \(Self.number(s.min)), \"max\": \(Self.number(s.max)), " + p99 + "\"runs\": \(s.count)}")
        }
        fflush(nil)
    }

    /// A JSON number: finite, rounded to a thousandth of the unit.
    static func number(_ value: Double) -> String {
        precondition(value.isFinite, "JSON has no \(value)")
        return "\((value * 1000).rounded() / 1000)"
    }

    /// A JSON string literal.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count)
                    + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// An aligned table, one row per impl, printed as each case ends. For each impl other than
/// `portkit`, the last column is portkit's median divided by that impl's; in a scale case
/// (impls with sizes), each size's median divided by the smallest size's of its series, as
/// "1.05x/10".
final class TableReport: BenchmarkReport {
    private var widths: [Int] = []
    private static let headers = ["bench", "impl", "unit", "median", "min", "max", "p99", "runs", "portkit/impl"]

    func begin(_ cases: [BenchmarkCase], runs: Int, quick: Bool) {
        let benchWidth = cases.map(\.name.count).max() ?? 0
        let implWidth = cases.flatMap { $0.impls.map(\.name.count) }.max() ?? 0
        let unitWidth = cases.map(\.unit.count).max() ?? 0
        widths = [
            max(benchWidth, 5), max(implWidth, 4), max(unitWidth, 4), 10, 10, 10, 10, 4, Self.headers[8].count,
        ]
        print("portkit-bench: \(runs) runs per impl, alternating, after 1 warm-up run\(quick ? " (quick)" : "")")
        print(row(Self.headers))
        print(row(widths.map { String(repeating: "-", count: $0) }))
        fflush(nil)
    }

    func report(_ results: [BenchmarkResult]) {
        let portkit = results.first { $0.impl == "portkit" }?.summary.median
        let smallest = Dictionary(grouping: results.filter { $0.size != nil }, by: \.series)
            .compactMapValues { rows in rows.min { $0.size! < $1.size! } }
        for result in results {
            let s = result.summary
            var ratio = ""
            if let size = result.size, let smallest = smallest[result.series], let base = smallest.size, smallest.summary.median > 0 {
                if size != base { ratio = String(format: "%.2fx/%d", s.median / smallest.summary.median, base) }
            } else if let portkit, result.impl != "portkit", s.median > 0 {
                ratio = String(format: "%.2fx", portkit / s.median)
            }
            print(row([
                result.bench, result.impl, result.unit,
                Self.fixed(s.median), Self.fixed(s.min), Self.fixed(s.max), result.p99.map(Self.fixed) ?? "", "\(s.count)", ratio,
            ]))
        }
        fflush(nil)
    }

    private static func fixed(_ value: Double) -> String { String(format: "%.2f", value) }

    /// Text columns left-aligned, numeric columns (from `median` on) right-aligned.
    private func row(_ cells: [String]) -> String {
        var line = zip(cells.indices, cells).map { index, cell in
            let pad = String(repeating: " ", count: max(0, widths[index] - cell.count))
            return index < 3 ? cell + pad : pad + cell
        }.joined(separator: "  ")
        while line.last == " " { line.removeLast() }
        return line
    }
}
