import Glibc
import PermanentThread
import PortMessaging
import PortKitSystem

/// What the server's activations hold: the starts under way, by name, and the service
/// processes it started and has not reaped yet, by pid. Touched on the server's loop only.
struct ActivationState {
    /// An activatable name being started: its service file, the time-out, and the process
    /// (none once a `systemctl start` has returned: the unit has the name to register).
    final class Start {
        /// Tells this start from a later one of the same name.
        let id: UInt64
        let file: ActivationFile
        var timer: LoopTimer?
        var pid: pid_t?

        init(id: UInt64, file: ActivationFile) {
            self.id = id
            self.file = file
        }
    }

    /// A process the server started, followed until it is reaped.
    final class Process {
        let name: String
        let child: SpawnedChild
        let descriptor: FileDescriptor
        var source: DescriptorSource?

        init(name: String, child: SpawnedChild, descriptor: FileDescriptor) {
            self.name = name
            self.child = child
            self.descriptor = descriptor
        }
    }

    var starting: [String: Start] = [:]
    var processes: [pid_t: Process] = [:]
    var startsMade: UInt64 = 0
}

/// Services started on demand: a lookup of an absent name that a service file declares
/// starts its service once (every lookup meanwhile waits for the same start) and is
/// answered when the service registers the name, or with `activationFailed` when the
/// process ends first or the time-out passes. The process's end is a descriptor source on
/// the server's loop (a pidfd), where it is reaped: no thread, no SIGCHLD handler.
extension NameService {
    /// Starts `name`'s service if a service file declares it and no start is under way,
    /// and makes `lookup` wait for the name; false when `name` is not activatable.
    func activate(_ name: String, _ client: Client, _ lookup: PendingLookup, milliseconds wait: UInt64) throws(NameServerError) -> Bool {
        guard !policy.serviceDirectories.isEmpty else { return false }
        let start: ActivationState.Start
        if let under = activation.starting[name] {
            start = under
        } else {
            switch ServiceCatalog(directories: policy.serviceDirectories).file(for: name) {
            case nil: return false
            case .failure(let problem)?: throw .activationFailed(name: name, reason: .couldNotStart(reason: problem.description))
            case .success(let file)?: start = try startService(file)
            }
        }
        // The start's own timer ends the wait; this one is a backstop, a second later.
        let backstop = UInt64(start.file.timeout / .milliseconds(1)) + 1000
        try addWaiter(for: name, client, lookup, milliseconds: max(wait, backstop))
        return true
    }

    /// The names the server's service files declare.
    var activatableNames: [String] {
        policy.serviceDirectories.isEmpty ? [] : ServiceCatalog(directories: policy.serviceDirectories).names
    }

    /// Whether a service file declares `name`.
    func isActivatable(_ name: String) -> Bool {
        guard !policy.serviceDirectories.isEmpty else { return false }
        return ServiceCatalog(directories: policy.serviceDirectories).file(for: name) != nil
    }

    /// `name` was registered: its start, if one was under way, is over. Its process runs on
    /// and is reaped when it ends.
    func activationRegistered(_ name: String) {
        guard !activation.starting.isEmpty, let start = activation.starting.removeValue(forKey: name) else { return }
        start.timer?.invalidate()
    }

    /// Forgets every start; the processes run on, and are reaped when they end by the
    /// process's shared reply loop (a server embedded in a program that goes on must not
    /// leave it zombies). On shutdown.
    func stopActivations() {
        for start in activation.starting.values { start.timer?.invalidate() }
        for process in activation.processes.values {
            process.source?.invalidate()
            Self.reapLater(process.child, descriptor: process.descriptor)
        }
        activation = ActivationState()
    }

    /// Has the shared reply loop reap `child` when its pidfd `descriptor` says it ended
    /// (closing the descriptor then); if that loop cannot watch it, the descriptor is
    /// closed and the child left to the program.
    private static func reapLater(_ child: SpawnedChild, descriptor: FileDescriptor) {
        let reap = DescriptorSource(descriptor: descriptor.rawValue, events: .readable) { source, _ in
            let ended: Bool
            // ECHILD: the program reaped it itself.
            do throws(Errno) { ended = try child.reapIfEnded() != nil } catch { ended = true }
            guard ended else { return }
            source.invalidate()
            try? descriptor.close()
        }
        do { try SharedReplyLoop.loop().add(reap, forMode: .common) } catch { try? descriptor.close() }
    }

    /// Spawns the service `file` names and follows it.
    private func startService(_ file: ActivationFile) throws(NameServerError) -> ActivationState.Start {
        let (executable, arguments): (String, [String])
        switch file.launch {
        case .exec(let path, let words): (executable, arguments) = (path, words)
        case .systemdUnit(let unit):
            let candidates: [String] = ["/usr/bin/systemctl", "/bin/systemctl"]
            guard let systemctl = candidates.first(where: { access($0, X_OK) == 0 }) else {
                throw .activationFailed(name: file.name, reason: .couldNotStart(reason: "no systemctl to start \(unit)"))
            }
            (executable, arguments) = (systemctl, (serverUID == 0 ? [] : ["--user"]) + ["start", unit])
        }
        let environment = SpawnedChild.currentEnvironment.filter {
            !$0.hasPrefix(Self.addressVariable + "=") && !$0.hasPrefix(Self.activatedNameVariable + "=")
        } + ["\(Self.addressVariable)=\(address)", "\(Self.activatedNameVariable)=\(file.name)"]
        let child: SpawnedChild
        let descriptor: FileDescriptor
        do {
            child = try SpawnedChild.spawnService(executable, arguments: arguments, environment: environment)
        } catch {
            throw .activationFailed(name: file.name, reason: .couldNotStart(reason: "\(executable): \(error)"))
        }
        do {
            // A pidfd polls readable once the process has ended.
            descriptor = try ProcessHandle.open(child.pid).descriptor
        } catch {
            // Without a pidfd the process cannot be followed from the loop: stop it.
            try? child.signal(SIGKILL)
            _ = try? child.wait()
            throw .activationFailed(name: file.name, reason: .couldNotStart(reason: "pidfd_open: \(error)"))
        }
        activation.startsMade += 1
        let start = ActivationState.Start(id: activation.startsMade, file: file)
        start.pid = child.pid
        let process = ActivationState.Process(name: file.name, child: child, descriptor: descriptor)
        let source = DescriptorSource(descriptor: descriptor.rawValue, events: .readable) { [unowned self] _, _ in
            self.processEnded(child.pid)
        }
        process.source = source
        let timer = LoopTimer(after: file.timeout) { [unowned self, id = start.id] _ in self.startTimedOut(file.name, id) }
        start.timer = timer
        try? loop.add(source, forMode: .default)
        try? loop.add(timer, forMode: .default)
        activation.starting[file.name] = start
        activation.processes[child.pid] = process
        statistics.report(.serviceStarted(name: file.name, pid: child.pid))
        return start
    }

    /// A process the server started has ended: it is reaped, and a start still waiting
    /// for it fails (a `systemctl start` that succeeded leaves the wait to the unit).
    private func processEnded(_ pid: pid_t) {
        guard let process = activation.processes[pid] else { return }
        let end: ChildEnd?
        do {
            // The pidfd reads ready only once the process has ended.
            guard let ended = try process.child.reapIfEnded() else { return }
            end = ended
        } catch {
            // ECHILD: the host program reaped it (waitpid(-1) in its own SIGCHLD handler).
            end = nil
        }
        activation.processes.removeValue(forKey: pid)
        process.source?.invalidate()
        try? process.descriptor.close()
        guard let start = activation.starting[process.name], start.pid == pid else { return }
        start.pid = nil
        if case .systemdUnit = start.file.launch, end == .exited(0) { return }
        activation.starting.removeValue(forKey: process.name)
        start.timer?.invalidate()
        switch end {
        case .exited(let status)?: failStart(process.name, .exited(status: status))
        case .signalled(let signal)?: failStart(process.name, .signalled(signal: signal))
        case nil: failStart(process.name, .couldNotStart(reason: "process \(pid) ended, reaped by another part of the program"))
        }
    }

    /// A start's time-out passed before its name was registered: its lookups fail, and its
    /// process, if still running, is asked to stop (SIGTERM), then reaped when it ends.
    private func startTimedOut(_ name: String, _ id: UInt64) {
        guard let start = activation.starting[name], start.id == id else { return }
        activation.starting.removeValue(forKey: name)
        if let pid = start.pid, case .exec = start.file.launch { try? activation.processes[pid]?.child.signal(SIGTERM) }
        failStart(name, .timedOut(after: start.file.timeout))
    }

    /// Answers every lookup waiting for `name` with the start's failure.
    private func failStart(_ name: String, _ reason: NameActivationFailure) {
        statistics.report(.serviceFailed(name: name, reason: reason))
        for waiter in table.takeWaiters(for: name) {
            waiter.waiting.end()
            guard let client = clients[waiter.client] else { continue }
            answer(waiter.waiting.reply, NameReply.encode(.activationFailed(name: name, reason: reason)), client)
        }
    }

    /// The variable a started service finds the server's address in (the one every client
    /// reads for its default address).
    static let addressVariable = "PORTKIT_NAME_SERVER"
    /// The variable a started service finds the name it was started for in.
    static let activatedNameVariable = "PORTKIT_ACTIVATION_NAME"
}
