import Glibc
import NamedPortServer
import PortMessaging

/// What `portnamed`'s command line asks for.
package struct DaemonOptions {
    package var address: String?
    package var policy = NameServerPolicy()
    package var logLevel = NameServerEvent.Severity.info
    /// The cluster's directory (an etcd endpoint) and this node's name, when it joins one.
    package var etcd: String?
    package var node: String?
    package var leaseTTL = 5
    /// Where the node's gateway takes connections from other hosts (with `etcd`).
    package var listen: PortAddress?
    /// The node's certificate, its key and the cluster's authority (PEM files): TLS
    /// between the nodes, all three or none.
    package var tlsCertificate: String?
    package var tlsKey: String?
    package var tlsAuthority: String?
    package var showHelp = false
    package var showVersion = false

    package static let usage = """
        usage: portnamed [--address PATH] [--socket-mode MODE] [--allow-uid UID]... [--allow-any-user]
                         [--max-connections N] [--max-names N] [--max-watches N]
                         [--max-waiting-lookups N] [--max-queued-bytes N] [--service-dir DIR]...
                         [--log-level warning|notice|info|debug]
                         [--etcd URL --node NAME [--lease-ttl SECONDS] [--listen HOST:PORT]
                          [--tls-cert PEM --tls-key PEM --tls-ca PEM]] [--help] [--version]

        The PortKit name server. Runs in the foreground, prints "listening on PATH" once it
        accepts connections, tells systemd it is ready when $NOTIFY_SOCKET is set, and logs
        one line per event to the standard error.

          --address PATH          the socket to listen at (default: see below)
          --socket-mode MODE      the socket file's permissions, octal (default 0600); not
                                  used under socket activation (the .socket unit sets it)
          --allow-uid UID         a user allowed to use the server besides its own user
                                  (repeatable; by default only its own user is)
          --allow-any-user        let every user who can reach the socket use the server
          --max-connections N     client connections at once (default 4096)
          --max-names N           names per connection (default 256)
          --max-watches N         watches per connection (default 64)
          --max-waiting-lookups N lookups waiting for a name, per connection (default 64)
          --max-queued-bytes N    unread output kept for a client before it is cut off
                                  (default 4194304)
          --service-dir DIR       a directory of service files (NAME.service) that make
                                  names activatable: a lookup of an absent one starts its
                                  service (repeatable, searched in order; replaces the
                                  default: $XDG_DATA_HOME/portkit/services, then
                                  /etc/portkit/services and /usr/share/portkit/services;
                                  the last two alone for root)
          --log-level LEVEL       the least important events logged: warning (refusals,
                                  limits), notice (names taken, invalid names), info (names
                                  registered and released; the default), debug (connections)
          --etcd URL              join a cluster: publish every name registered here with
                                  cluster scope in the etcd directory at URL
                                  (http://HOST:PORT, or https://HOST:PORT with the
                                  TLS options, etcd's certificate from the same
                                  authority), unique across its nodes (a name
                                  another node holds is refused), and mirror the other
                                  nodes' names
          --node NAME             this node's name in the cluster (with --etcd)
          --lease-ttl SECONDS     how long this node's names outlive it in the directory
                                  when it dies without stopping (default 5)
          --listen HOST:PORT      take connections from other hosts for the names held
                                  here (with --etcd; port 0: any free port, printed as
                                  "gateway on HOST:PORT"); without the TLS options, plain
                                  TCP, so loopback only
                                  The gateway's limits: at most 1024 callers at once,
                                  and never more than half the descriptor limit (less
                                  the TLS handshakes under way), so the name server
                                  keeps the rest; further ones are closed as they come.
                                  A caller's first message is its open request, at most
                                  1 KiB (a larger one is refused at its header); it
                                  must open a name within 10 seconds, and a message
                                  begun must be whole within 30. At most 256 TLS
                                  handshakes at once (an eighth of the descriptor
                                  limit if less): one beyond them takes the place of
                                  the oldest whose peer has sent nothing yet.
          --tls-cert PEM          this node's certificate, issued by the cluster's
                                  authority, its common name the node's name; with
          --tls-key PEM           its private key, and
          --tls-ca PEM            the cluster's authority: every connection between nodes
                                  is TLS 1.3, both sides' certificates checked against it
          --help                  print this and exit
          --version               print the version and exit

        Address: PATH, else $PORTKIT_NAME_SERVER, else $XDG_RUNTIME_DIR/portkit/names.sock,
        else /tmp/portkit-UID/names.sock. Under systemd socket activation (LISTEN_PID and
        LISTEN_FDS) it serves the socket it is given instead.

        Signals: SIGTERM and SIGINT stop it cleanly (its socket and lock file are removed);
        SIGHUP is logged and ignored (the policy is fixed at start: restart to change it).

        Exit status: 0 after a clean stop, 1 when it cannot start (a live server at the
        address, a directory that is not private), 2 for usage errors.
        """

    /// Parses the arguments (without the program name).
    /// - Throws: a message for a usage error.
    package static func parse(_ arguments: [String]) throws(UsageError) -> DaemonOptions {
        var options = DaemonOptions()
        var allowed: Set<UInt32> = []
        var anyUser = false
        var serviceDirectories: [String] = []
        var rest = arguments[...]
        func value(_ option: String) throws(UsageError) -> String {
            guard let value = rest.popFirst() else { throw UsageError("\(option) needs a value") }
            return value
        }
        func count(_ option: String) throws(UsageError) -> Int {
            let text = try value(option)
            guard let number = Int(text), number > 0 else { throw UsageError("\(option) needs a positive number, not '\(text)'") }
            return number
        }
        while let argument = rest.popFirst() {
            switch argument {
            case "--address":
                // Only an empty $PORTKIT_NAME_SERVER means the default: an empty flag is a slip.
                let path = try value(argument)
                guard !path.isEmpty else { throw UsageError("--address needs a path, not an empty string") }
                options.address = path
            case "--socket-mode":
                let text = try value(argument)
                guard let mode = UInt32(text, radix: 8), mode <= 0o777 else {
                    throw UsageError("--socket-mode needs octal permission bits such as 0600, not '\(text)'")
                }
                options.policy.socketPermissions = mode
            case "--allow-uid":
                let text = try value(argument)
                guard let uid = UInt32(text) else { throw UsageError("--allow-uid needs a numeric user id, not '\(text)'") }
                allowed.insert(uid)
            case "--allow-any-user": anyUser = true
            case "--max-connections": options.policy.maxConnections = try count(argument)
            case "--max-names": options.policy.maxNamesPerConnection = try count(argument)
            case "--max-watches": options.policy.maxWatchesPerConnection = try count(argument)
            case "--max-waiting-lookups": options.policy.maxWaitingLookupsPerConnection = try count(argument)
            case "--max-queued-bytes": options.policy.maxQueuedBytesPerConnection = try count(argument)
            case "--service-dir":
                let directory = try value(argument)
                guard directory.hasPrefix("/") else { throw UsageError("--service-dir needs an absolute path, not '\(directory)'") }
                serviceDirectories.append(directory)
            case "--log-level":
                let text = try value(argument)
                guard let level = NameServerEvent.Severity.allCases.first(where: { $0.description == text }) else {
                    throw UsageError("--log-level needs one of warning, notice, info, debug, not '\(text)'")
                }
                options.logLevel = level
            case "--etcd": options.etcd = try value(argument)
            case "--node": options.node = try value(argument)
            case "--lease-ttl": options.leaseTTL = try count(argument)
            case "--tls-cert": options.tlsCertificate = try value(argument)
            case "--tls-key": options.tlsKey = try value(argument)
            case "--tls-ca": options.tlsAuthority = try value(argument)
            case "--listen":
                let text = try value(argument)
                guard let address = PortAddress(tcp: text) else { throw UsageError("--listen needs HOST:PORT, not '\(text)'") }
                options.listen = address
            case "-h", "--help": options.showHelp = true
            case "--version": options.showVersion = true
            default: throw UsageError("unexpected argument '\(argument)'")
            }
        }
        guard (options.etcd == nil) == (options.node == nil) else { throw UsageError("--etcd and --node go together") }
        guard options.listen == nil || options.etcd != nil else { throw UsageError("--listen needs --etcd and --node") }
        let tls = [options.tlsCertificate, options.tlsKey, options.tlsAuthority]
        guard tls.allSatisfy({ $0 == nil }) || tls.allSatisfy({ $0 != nil }) else {
            throw UsageError("--tls-cert, --tls-key and --tls-ca go together")
        }
        guard options.tlsCertificate == nil || options.etcd != nil else { throw UsageError("--tls-cert, --tls-key and --tls-ca need --etcd and --node") }
        if let etcd = options.etcd, etcd.hasPrefix("https://"), options.tlsCertificate == nil {
            throw UsageError("an https:// --etcd URL needs --tls-cert, --tls-key and --tls-ca (etcd's certificate from the same authority)")
        }
        options.policy.serviceDirectories = serviceDirectories.isEmpty ? ServiceDirectory.defaultDirectories : serviceDirectories
        if anyUser {
            guard allowed.isEmpty else { throw UsageError("--allow-any-user and --allow-uid exclude each other") }
            options.policy.allowedUsers = nil
        } else {
            options.policy.allowedUsers = allowed.union([UInt32(getuid())])
        }
        return options
    }
}

/// A command line `portnamed` cannot run: the message says what is wrong.
package struct UsageError: Error {
    package var message: String
    init(_ message: String) { self.message = message }
}
