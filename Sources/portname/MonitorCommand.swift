import Glibc
import NamedPortServer

/// `monitor NAME|PREFIX*...`: every message on the connections brokered to those names
/// while it runs, one line each, until interrupted.
enum MonitorCommand {
    static func run(_ options: Options, address: String?) throws(Exit) {
        guard !options.positional.isEmpty else { throw .usage("monitor takes at least one NAME or PREFIX*", verb: .monitor) }
        let patterns = options.positional
        for pattern in patterns {
            do { try NameMonitor.validate(pattern: pattern) } catch { throw Exit(error) }
        }
        let client = try connect(address)
        let json = options.wantsJSON
        // The events come on the shared reply loop to a task; this thread only waits.
        Task { () async -> Void in
            do throws(NameServerError) {
                let monitor = try await client.monitor(patterns)
                say(json ? startedLine(patterns) : "monitoring \(patterns.joined(separator: " "))")
                for try await event in monitor { say(line(event, json: json)) }
                exit(0)
            } catch {
                let exit = Exit(error)
                if let message = exit.message { sayError(message) }
                Glibc.exit(exit.status)
            }
        }
        while true { pause() }
    }

    /// `{"event": "monitoring", "names": "P1 P2"}`.
    private static func startedLine(_ patterns: [String]) -> String {
        var line = JSONLine()
        line.add("event", "monitoring")
        line.add("names", patterns.joined(separator: " "))
        return line.text
    }

    /// `TIME NAME#CONNECTION ARROW KIND id=ID corr=N pid=PID uid=UID size=BYTES [COMPONENTS]`
    /// (`->` to the name, `<-` from it); with `json`, one object with the same facts.
    static func line(_ event: MonitoredMessage, json: Bool) -> String {
        let seconds = Double(event.time.components.seconds) + Double(event.time.components.attoseconds) / 1e18
        let components = event.components.map { component in
            switch component {
            case .bytes(let count): "bytes:\(count)"
            case .port: "port"
            case .descriptor: "descriptor"
            }
        }.joined(separator: ",")
        let kind = switch event.kind {
        case .request: "request"
        case .reply: "reply"
        case .message: "message"
        case .noReply: "no_reply"
        case .opened: "opened"
        case .closed: "closed"
        }
        guard json else {
            let arrow = event.direction == .toName ? "->" : "<-"
            let sender = event.sender.map { " pid=\($0.pid) uid=\($0.uid)" } ?? ""
            let micros = event.time.components.attoseconds / 1_000_000_000_000
            let fraction = String(micros)
            let time = "\(event.time.components.seconds)." + String(repeating: "0", count: 6 - fraction.count) + fraction
            return "\(time) \(event.name)#\(event.connection) \(arrow) \(kind) id=\(event.id) corr=\(event.correlation)"
                + "\(sender) size=\(event.byteCount) [\(components)]"
        }
        var line = JSONLine()
        line.add("time", (seconds * 1e6).rounded() / 1e6)
        line.add("name", event.name)
        line.add("connection", Int(clamping: event.connection))
        line.add("event", kind)
        line.add("direction", event.direction == .toName ? "to" : "from")
        line.add("id", Int(event.id))
        line.add("correlation", Int(clamping: event.correlation))
        if let sender = event.sender {
            line.add("pid", Int(sender.pid))
            line.add("uid", Int(sender.uid))
            line.add("gid", Int(sender.gid))
        }
        line.add("size", event.byteCount)
        line.add("components", components)
        line.add("reply_port", event.hasReplyPort)
        return line.text
    }
}
