import Glibc

/// One service file of a service directory: the name it makes activatable, how to start
/// its service, and how long the start may take (docs/NAMES.md, "Services started on
/// demand").
///
/// ```
/// [PortKit Service]
/// Name=org.example.db
/// Exec=/usr/libexec/example-db --data "/var/lib/example db"
/// TimeoutSec=5
/// ```
///
/// Lines are `Key=value` (spaces around the key and the value are ignored); blank lines,
/// lines starting with `#` or `;`, and section headers (`[PortKit Service]`) are skipped.
/// `Name=` and one of `Exec=` or `SystemdUnit=` are required; `TimeoutSec=` (seconds, a
/// decimal fraction allowed) defaults to `defaultTimeout`. An unknown key is refused, so a
/// misspelt one is not silently ignored.
struct ActivationFile: Hashable, Sendable {
    /// How the service is started.
    enum Launch: Hashable, Sendable {
        /// Run `executable` with `arguments`, as the server's user.
        case exec(executable: String, arguments: [String])
        /// `systemctl start UNIT` (with `--user` from a server that is not root).
        case systemdUnit(String)
    }

    /// The activatable name.
    let name: String
    /// What to run.
    let launch: Launch
    /// How long the service has to register the name.
    let timeout: Duration
    /// The file it was read from.
    let path: String

    /// How long a service has to register its name when its file says nothing.
    static let defaultTimeout = Duration.seconds(5)
    /// The longest `TimeoutSec=` taken (a lookup's own wait is capped at a day).
    static let maxTimeout = Duration.seconds(3600)

    /// Reads a service file's text; the error says which line is wrong and why.
    static func parse(_ text: String, path: String) -> Result<ActivationFile, ActivationFileError> {
        var values: [String: (value: String, line: Int)] = [:]
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingWhitespace
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") || line.hasPrefix("[") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                return .failure(ActivationFileError(path: path, line: index + 1, reason: "expected Key=value"))
            }
            let key = String(line[..<equals]).trimmingWhitespace
            guard ["Name", "Exec", "SystemdUnit", "TimeoutSec"].contains(key) else {
                return .failure(ActivationFileError(path: path, line: index + 1, reason: "unknown key '\(key)'"))
            }
            values[key] = (String(line[line.index(after: equals)...]).trimmingWhitespace, index + 1)
        }
        func failure(_ key: String, _ reason: String) -> Result<ActivationFile, ActivationFileError> {
            .failure(ActivationFileError(path: path, line: values[key]?.line ?? 0, reason: reason))
        }
        guard let name = values["Name"]?.value, !name.isEmpty else { return failure("Name", "no Name=") }
        if let invalid = NameRules.problem(with: name, allowEmpty: false) { return failure("Name", "invalid name: \(invalid)") }
        let launch: Launch
        switch (values["Exec"]?.value, values["SystemdUnit"]?.value) {
        case (let exec?, nil):
            switch ExecLine.split(exec) {
            case .failure(let reason): return failure("Exec", reason.description)
            case .success(let words):
                guard let executable = words.first, executable.hasPrefix("/") else {
                    return failure("Exec", "the program must be an absolute path")
                }
                launch = .exec(executable: executable, arguments: Array(words.dropFirst()))
            }
        case (nil, let unit?):
            guard !unit.isEmpty, !unit.contains(where: \.isWhitespace), !unit.hasPrefix("-") else {
                return failure("SystemdUnit", "not a unit name")
            }
            launch = .systemdUnit(unit)
        case (nil, nil): return failure("Name", "neither Exec= nor SystemdUnit=")
        case (_?, _?): return failure("SystemdUnit", "both Exec= and SystemdUnit=")
        }
        var timeout = defaultTimeout
        if let text = values["TimeoutSec"]?.value {
            guard let seconds = Double(text), seconds > 0, seconds.isFinite else {
                return failure("TimeoutSec", "not a positive number of seconds")
            }
            timeout = min(.milliseconds(Int64((seconds * 1000).rounded(.up))), maxTimeout)
        }
        return .success(ActivationFile(name: name, launch: launch, timeout: timeout, path: path))
    }
}

/// A service file that cannot be used: where and why.
struct ActivationFileError: Error, Hashable, Sendable, CustomStringConvertible {
    let path: String
    let line: Int
    let reason: String

    var description: String { line > 0 ? "\(path):\(line): \(reason)" : "\(path): \(reason)" }
}

extension StringProtocol {
    /// The text without spaces and tabs at either end.
    var trimmingWhitespace: String {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isBlank($0) }), let last = lastIndex(where: { !isBlank($0) }) else { return "" }
        return String(self[first...last])
    }
}
