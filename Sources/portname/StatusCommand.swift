import NamedPortServer

/// `status NAME`: the owner of a name, as the server knows it.
enum StatusCommand {
    static func run(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.count == 1 else { throw .usage("status takes at most one NAME", verb: .status) }
        let name = try validName(options.positional[0])
        let client = try connect(address)
        let status: NameOwnerStatus
        do {
            status = try client.blockingStatus(of: name)
        } catch {
            throw Exit(error)
        }
        say(options.wantsJSON ? json(status) : text(status))
    }

    /// One `key: value` line each, in `json`'s order; what is unknown is left out.
    static func text(_ status: NameOwnerStatus) -> String {
        var lines = [
            "name: \(status.owner.name)", "pid: \(status.owner.pid)", "uid: \(status.owner.uid)", "gid: \(status.gid)",
        ]
        if let executable = status.executable { lines.append("executable: \(executable)") }
        if let group = status.controlGroup { lines.append("cgroup: \(group)") }
        if let unit = status.systemdUnit { lines.append("unit: \(unit)") }
        if let activatable = status.isActivatable { lines.append("activatable: \(activatable)") }
        if let standbys = status.standbys { lines.append("standbys: " + standbys.map { "\($0.pid)" }.joined(separator: " ")) }
        return lines.joined(separator: "\n")
    }

    /// `{"name": …, "pid": …, "uid": …, "gid": …, "executable": …, "cgroup": …, "unit": …,
    /// "activatable": …, "standbys": [PID, …]}`, each of the last five only when known.
    static func json(_ status: NameOwnerStatus) -> String {
        var line = JSONLine()
        line.add(status.owner)
        line.add("gid", Int(status.gid))
        if let executable = status.executable { line.add("executable", executable) }
        if let group = status.controlGroup { line.add("cgroup", group) }
        if let unit = status.systemdUnit { line.add("unit", unit) }
        if let activatable = status.isActivatable { line.add("activatable", activatable) }
        if let standbys = status.standbys { line.add("standbys", standbys.map { Int($0.pid) }) }
        return line.text
    }
}
