import NamedPortServer

/// One JSON object on one line, its keys in the order they were added: what `--json`
/// prints, for `jq` and scripts.
struct JSONLine {
    private var members: [String] = []

    mutating func add(_ key: String, _ value: String) { members.append("\(Self.quoted(key)): \(Self.quoted(value))") }
    mutating func add(_ key: String, _ value: Int) { members.append("\(Self.quoted(key)): \(value)") }
    mutating func add(_ key: String, _ value: Bool) { members.append("\(Self.quoted(key)): \(value)") }
    mutating func add(_ key: String, _ value: Double) { members.append("\(Self.quoted(key)): \(value)") }
    mutating func add(_ key: String, _ values: [Int]) {
        members.append("\(Self.quoted(key)): [" + values.map(String.init).joined(separator: ", ") + "]")
    }

    var text: String { "{" + members.joined(separator: ", ") + "}" }

    /// A JSON string literal.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

extension JSONLine {
    /// `{"name": …, "pid": …, "uid": …}`, the fields of a `list` line in its order, and
    /// `"node": …` after them for a name on another node.
    init(_ owner: NameOwner) {
        add(owner)
    }

    /// Adds the fields of a `list` line, in its order: name, pid, uid, and node for a name
    /// on another node.
    mutating func add(_ owner: NameOwner) {
        add("name", owner.name)
        add("pid", Int(owner.pid))
        add("uid", Int(owner.uid))
        if let node = owner.node { add("node", node) }
    }
}
