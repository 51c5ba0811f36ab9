import Glibc
import NamedPortServer
import PermanentThread
import PortKitSystem

/// The name server daemon: `portnamed`, and `portnamed-cluster`, which is the same daemon
/// with the cluster layer (and OpenSSL) linked in. `portnamed` given cluster options
/// becomes `portnamed-cluster` (the program beside it, in the same process), so a daemon
/// without a cluster never loads that code.
///
/// Runs in the foreground, prints "listening on PATH" once it accepts connections,
/// notifies systemd when asked (`$NOTIFY_SOCKET`), logs one line per event to stderr, and
/// stops cleanly (removing its socket and lock file) on SIGTERM or SIGINT; SIGHUP is logged
/// and ignored. Exit status: 0 after a clean stop, 1 when it cannot start, 2 for usage
/// errors.
package enum Daemon {
    /// The program that runs the daemon in cluster mode, beside `portnamed`.
    package static let clusterProgram = "portnamed-cluster"

    /// Becomes `portnamed-cluster` (beside this program) with the same arguments; exits
    /// with status 1 when it cannot.
    private static func becomeClusterDaemon(_ arguments: [String]) -> Never {
        guard let program = ProcessImage.sibling(clusterProgram) else {
            DaemonLog(level: .warning).failure("cluster mode: cannot find where portnamed is installed")
            exit(1)
        }
        let failure = ProcessImage.replace(with: program, arguments: arguments)
        DaemonLog(level: .warning).failure("cluster mode needs \(program): \(failure)")
        exit(1)
    }

    /// Runs the daemon with `arguments` (without the program's name) until a signal stops
    /// it. `startCluster` starts cluster mode for options with `--etcd` (exiting with its
    /// own status when it cannot); `nil` for a daemon without the cluster layer, which
    /// options with `--etcd` make become `portnamed-cluster` (`clusterProgram`).
    package static func run(
        _ arguments: [String], startCluster: ((DaemonOptions, DaemonLog) -> any DaemonCluster)?
    ) -> Never {
        let options: DaemonOptions
        do {
            options = try DaemonOptions.parse(arguments)
        } catch {
            // The mistake and where help is, not the whole help: it would bury the one line.
            DaemonLog(level: .warning).failure("\(error.message)\n(see 'portnamed --help')")
            exit(2)
        }
        if options.showHelp {
            print(DaemonOptions.usage)
            exit(0)
        }
        if options.showVersion {
            print("portnamed \(NamedPortServerModule.version)")
            exit(0)
        }
        // Cluster mode without the cluster layer: become the program that has it, before
        // anything is started here.
        if options.etcd != nil, startCluster == nil { becomeClusterDaemon(arguments) }

        let log = DaemonLog(level: options.logLevel)
        let notifier = ServiceNotifier()

        // Before the server's thread exists, so that every thread inherits the blocked mask and
        // the signals reach only the signalfd.
        let signals: SignalSource
        do {
            signals = try SignalSource([SIGTERM, SIGINT, SIGHUP])
        } catch {
            log.failure("cannot take signals (signalfd: \(Errno(rawValue: error.errno)))")
            exit(1)
        }

        let cluster = options.etcd == nil ? nil : startCluster?(options, log)

        let server: NameServer
        do {
            let trim = MemoryTrim(on: ThreadLoop.current)
            let events: NameServerEventHandler = { event in
                log.event(event)
                trim.note(event)
            }
            if let activated = NameServer.socketFromActivation() {
                server = try NameServer.start(
                    adoptingListeningSocket: activated, policy: options.policy, events: events, directory: cluster?.directory)
            } else {
                server = try NameServer.start(at: options.address, policy: options.policy, events: events, directory: cluster?.directory)
            }
        } catch {
            log.failure("\(error)")
            exit(1)
        }

        cluster?.serverListens(at: server.address)
        // The log line first: whoever waits for the printed line finds the log already begun.
        log.line(.notice, "listening on \(server.address) (pid \(getpid()))")
        if let gateway = cluster?.gatewayAddress {
            log.line(.notice, "gateway on \(gateway)")
            print("gateway on \(gateway)")
        }
        print("listening on \(server.address)")
        fflush(nil)
        if let failure = notifier.ready(status: "listening on \(server.address)") {
            log.line(.warning, "cannot notify the service manager: \(Errno(rawValue: failure))")
        }

        // The main thread runs a loop whose one source is the signalfd.
        let loop = ThreadLoop.current
        do {
            try signals.schedule(on: loop) { signal in
                switch signal {
                case SIGHUP:
                    log.line(.notice, "SIGHUP received: nothing to reload (the policy is set at start; restart to change it)")
                default:
                    log.line(.notice, "\(signal == SIGINT ? "SIGINT" : "SIGTERM") received: stopping")
                    notifier.stopping()
                    loop.stop()
                }
            }
        } catch {
            log.failure("cannot watch for signals: \(error)")
            exit(1)
        }
        // Only the SIGTERM/SIGINT handler stops this loop; its source keeps every run going.
        do throws(ThreadLoopError) {
            while try loop.run(mode: .default, until: nil) != .stopped {}
        } catch {
            log.failure("the main loop failed: \(error)")
            exit(1)
        }
        server.stop()
        cluster?.close()
        log.line(.info, "stopped")
        exit(0)
    }
}

/// What cluster mode adds to the daemon (`portnamed-cluster`): the directory the server
/// tells about cluster-scope names, and the gateway other hosts reach them through.
package protocol DaemonCluster: Sendable {
    /// Who holds a name on another node: what the server asks before it registers one.
    var directory: any NameDirectory { get }
    /// Where the gateway takes connections from other hosts, when it runs.
    var gatewayAddress: String? { get }
    /// The server listens at `address`: where the gateway looks names up.
    func serverListens(at address: String)
    /// Stops the gateway and withdraws the node's names (revoking its lease, so that they
    /// leave the directory at once, not at its expiry).
    func close()
}
