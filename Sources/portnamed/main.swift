// portnamed: the PortKit name server as a daemon (docs/man/portnamed.8). Runs in the
// foreground, prints "listening on PATH" once it accepts connections, notifies systemd
// when asked ($NOTIFY_SOCKET), logs one line per event to stderr, and stops cleanly
// (removing its socket and lock file) on SIGTERM or SIGINT; SIGHUP is logged and ignored.
// Exit status: 0 after a clean stop, 1 when it cannot start, 2 for usage errors.
import Glibc
import NamedPortServer
import PortCluster

let options: DaemonOptions
do {
    options = try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst()))
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

var cluster: ClusterLink?
if let etcd = options.etcd, let node = options.node {
    do {
        var tls: ClusterTLS?
        if let certificate = options.tlsCertificate, let key = options.tlsKey, let authority = options.tlsAuthority {
            do { tls = try ClusterTLS(certificate: certificate, privateKey: key, authority: authority) } catch {
                log.failure("cannot use the node's certificate: \(error)")
                exit(1)
            }
        }
        cluster = try ClusterLink(endpoint: etcd, nodeName: node, leaseTTL: options.leaseTTL, listen: options.listen, tls: tls, log: log)
    } catch let error as DirectoryError {
        DaemonLog(level: .warning).failure("\(error)\n(see 'portnamed --help')")
        exit(2)
    } catch {
        log.failure("cannot take connections from other hosts: \(error)")
        exit(1)
    }
}

let server: NameServer
do {
    let trim = MemoryTrim(on: ThreadLoop.current)
    let events: NameServerEventHandler = { event in
        log.event(event)
        trim.note(event)
    }
    if let activated = NameServer.socketFromActivation() {
        server = try NameServer.start(
            adoptingListeningSocket: activated, policy: options.policy, events: events, directory: cluster?.node)
    } else {
        server = try NameServer.start(at: options.address, policy: options.policy, events: events, directory: cluster?.node)
    }
} catch {
    log.failure("\(error)")
    exit(1)
}

cluster?.serverAddress.withLock { $0 = server.address }
// The log line first: whoever waits for the printed line finds the log already begun.
log.line(.notice, "listening on \(server.address) (pid \(getpid()))")
if let gateway = cluster?.gateway {
    log.line(.notice, "gateway on \(gateway.address)")
    print("gateway on \(gateway.address)")
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
while (try? loop.run(mode: .default, until: nil)) != .stopped {}
server.stop()
cluster?.gateway?.close()
// Revokes the node's lease: its names leave the directory at once, not at its expiry.
cluster?.node.close()
log.line(.info, "stopped")
exit(0)
