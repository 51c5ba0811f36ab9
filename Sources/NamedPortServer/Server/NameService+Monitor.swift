import Glibc
import PermanentThread
import PortMessaging

/// The monitors a server has, and the connections it taps for them.
///
/// While no monitor is attached, a lookup brokers a direct connection to the owner and
/// nothing here is consulted but `isEmpty`. While one watches a name, each lookup of it
/// brokers a tapped connection instead (`MonitorTap`), whose traffic the monitors see.
struct MonitorBoard {
    /// One monitor: who asked (its user; its connection is its key's), which names, and
    /// where its events go.
    struct Monitor {
        let uid: UInt32
        let filters: [WatchFilter]
        let port: SendPort

        func watches(_ name: String) -> Bool { filters.contains { $0.matches(name) } }
    }

    var monitors: [WatchKey: Monitor] = [:]
    var taps: [UInt64: MonitorTap] = [:]
    var nextTap: UInt64 = 1

    /// Whether no monitor is attached: then lookups are brokered directly.
    var isEmpty: Bool { monitors.isEmpty }

    /// The monitors that see `name`, owned by `ownerUID`: those watching it whose user may.
    func monitors(of name: String, ownerUID: UInt32) -> [(key: WatchKey, monitor: Monitor)] {
        monitors.filter { $0.value.watches(name) && NameServerPolicy.mayMonitor(uid: $0.value.uid, ownerUID: ownerUID) }
            .map { ($0.key, $0.value) }
    }
}

extension NameServerPolicy {
    /// Whether a client of `uid` may monitor a name whose owner runs as `ownerUID`: its
    /// owner's user, and root.
    static func mayMonitor(uid: UInt32, ownerUID: UInt32) -> Bool { uid == 0 || uid == ownerUID }
}

extension NameService {
    /// `monitor`: [monitor id, port, pattern…] → ok [owners the patterns match now]. A pattern
    /// is a name, or a prefix followed by `*`. Refused (`permissionDenied`) when a name the
    /// patterns match now belongs to another user than the client's (root excepted).
    func startMonitor(_ fields: inout NameFieldReader, _ client: Client, _ pending: PendingReply) throws(NameServerError) {
        let monitorID = try fields.integer()
        let port = try fields.port()
        do throws(NameServerError) {
            var filters: [WatchFilter] = []
            while !fields.atEnd {
                let raw = try fields.bytes()
                let prefix = raw.last == UInt8(ascii: "*")
                let text = try NameRules.decode(prefix ? Array(raw.dropLast()) : raw, allowEmpty: prefix).get()
                filters.append(WatchFilter(text: text, exact: !prefix))
            }
            guard !filters.isEmpty else { throw .protocolError("a monitor request names at least one name or prefix") }
            let mine = monitoring.monitors.keys.filter { $0.connectionID == client.peer.id }.count
            guard mine < policy.maxWatchesPerConnection else {
                throw .limitExceeded(what: "monitors per connection", limit: policy.maxWatchesPerConnection)
            }
            let key = WatchKey(connectionID: client.peer.id, watchID: monitorID)
            guard monitoring.monitors[key] == nil else { throw .protocolError("monitor \(monitorID) exists already") }
            let matched = table.owners.filter { owner in filters.contains { $0.matches(owner.name) } }
            if let other = matched.first(where: { !NameServerPolicy.mayMonitor(uid: client.uid, ownerUID: $0.uid) }) {
                throw .permissionDenied(reason: "uid \(client.uid) may not monitor '\(other.name)', owned by uid \(other.uid)")
            }
            monitoring.monitors[key] = MonitorBoard.Monitor(uid: client.uid, filters: filters, port: port)
            try? port.onInvalidation(on: loop) { [unowned self] dead in
                if self.monitoring.monitors[key]?.port === dead { self.endMonitor(key) }
            }
            answer(pending, Message(id: NameStatus.ok.rawValue, components: [NameField.owners(matched)]), client)
        } catch {
            port.invalidate()
            throw error
        }
    }

    /// Ends a monitor: its port is closed, which its client sees as the end of its events.
    /// The connections tapped meanwhile go on being relayed until they close.
    func endMonitor(_ key: WatchKey) {
        monitoring.monitors.removeValue(forKey: key)?.port.invalidate()
    }

    /// Ends the monitors of a client that is gone.
    func endMonitors(of client: UInt64) {
        guard !monitoring.isEmpty else { return }
        for key in monitoring.monitors.keys where key.connectionID == client { endMonitor(key) }
    }

    /// Ends every monitor and tapped connection (the server stops).
    func endMonitoring() {
        for key in monitoring.monitors.keys { endMonitor(key) }
        for tap in monitoring.taps.values { tap.close() }
    }

    /// A tapped connection to `holder`'s port for `looker`, when a monitor watches the name;
    /// `nil` otherwise, or when the tap cannot be made (the lookup then brokers directly).
    func tap(_ holder: NameTable<SendPort, PendingLookup>.Holder, _ channel: SendPort, for looker: Client) -> MonitorTap? {
        let name = holder.owner.name
        guard !monitoring.monitors(of: name, ownerUID: holder.owner.uid).isEmpty else { return nil }
        let number = monitoring.nextTap
        let tap: MonitorTap
        do {
            let exit = try channel.brokeredConnection()
            tap = MonitorTap(
                number: number, name: name, ownerUID: holder.owner.uid, loop: loop, exit: exit,
                report: { [unowned self] event in self.tellMonitors(event, ownerUID: holder.owner.uid) },
                ended: { [unowned self] tap in self.monitoring.taps.removeValue(forKey: tap.number) })
            do { try tap.start() } catch {
                exit.invalidate()
                tap.entrance.invalidate()
                return nil
            }
        } catch {
            return nil
        }
        monitoring.nextTap += 1
        monitoring.taps[number] = tap
        let gid = looker.peer.credentials?.gid ?? UInt32.max
        let opened = tap.event(.opened, .toName, sender: SenderCredentials(pid: looker.pid, uid: looker.uid, gid: gid))
        tellMonitors(opened, ownerUID: holder.owner.uid)
        return tap
    }

    /// Sends `event` to the monitors that see its name and whose user may see a name of
    /// `ownerUID`'s; a monitor whose port does not take it at once (far behind, or gone)
    /// ends, as a watch does.
    func tellMonitors(_ event: MonitoredMessage, ownerUID: UInt32) {
        let message = MonitorEventCodec.encode(event)
        for (key, monitor) in monitoring.monitors
        where monitor.watches(event.name) && NameServerPolicy.mayMonitor(uid: monitor.uid, ownerUID: ownerUID) {
            do { try monitor.port.send(message, timeout: .zero) } catch { endMonitor(key) }
        }
    }
}
