import NamedPortServer

/// `watch`: the current owners, then every change, one line each, until interrupted.
enum WatchCommand {
    static func run(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.count <= 1 else { throw .usage("watch takes at most one PREFIX", verb: .watch) }
        let prefix = options.positional.first ?? ""
        do {
            try NameRules.validatePrefix(prefix)
        } catch {
            throw Exit(error)
        }
        let client = try connect(address)
        do {
            let watch = try client.blockingWatch(prefix: prefix)
            for owner in watch.initialOwners { say(line(.appeared(owner), initial: true, json: options.wantsJSON)) }
            while let event = try watch.next() { say(line(event, initial: false, json: options.wantsJSON)) }
        } catch {
            throw Exit(error)
        }
    }

    /// `+ NAME PID UID` / `- NAME PID UID`: a `list` line's fields, in its order, after the
    /// sign (and ` NODE` for a name on another node).
    static func line(_ event: NameEvent, initial: Bool, json: Bool) -> String {
        guard json else { return event.description }
        let owner = event.owner
        let appeared = if case .appeared = event { true } else { false }
        var line = JSONLine()
        line.add("event", appeared ? "appeared" : "vanished")
        line.add(owner)
        line.add("initial", initial)
        return line.text
    }
}
