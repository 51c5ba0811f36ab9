import NamedPortServer
import PermanentThread

/// `watch`: the current owners, then every change, one line each, until interrupted;
/// across a restart of the server it goes on with what changed while it was away.
enum WatchCommand {
    static func run(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.count <= 1 else { throw .usage("watch takes at most one PREFIX", verb: .watch) }
        let prefix = options.positional.first ?? ""
        do {
            try NameRules.validatePrefix(prefix)
        } catch {
            throw Exit(error)
        }
        // A reconnecting client on a thread whose loop always runs: when the server
        // restarts, it reconnects and the watch resumes on the new one with what changed
        // meanwhile. The watch's port is on that loop too; this thread waits in `next`.
        let supervisor = PermanentThread(name: "portname-watch")
        guard (try? supervisor.run()) != nil, let loop = supervisor.loop else {
            throw Exit(status: 1, message: "cannot start the watch's thread")
        }
        let client = try connect(address, reconnectingOn: loop)
        let started: Result<NameWatch, NameServerError>
        do {
            started = try supervisor.sync { Result { () throws(NameServerError) in try client.blockingWatch(prefix: prefix) } }
        } catch {
            throw Exit(status: 1, message: "cannot start the watch: \(error)")
        }
        do {
            let watch = try started.get()
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
