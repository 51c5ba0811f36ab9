import NamedPortServer

/// The commands `portname` runs.
enum Verb: String, CaseIterable {
    case list, lookup, watch, status, serve, send, call, monitor

    /// The verb's synopsis line (after `portname [--address PATH]`).
    var synopsis: String {
        switch self {
        case .list: return "list [--activatable | --cluster URL [--tls-cert PEM --tls-key PEM --tls-ca PEM]] [--json]"
        case .lookup: return "lookup NAME [--wait SECONDS] [--json]"
        case .watch: return "watch [PREFIX] [--json]"
        case .status: return "status [NAME] [--json]"
        case .serve: return "serve NAME [--echo] [--cluster] [--queue | --replace] [--replaceable] [--json]"
        case .send: return "send NAME [--id N] [--timeout SECONDS] [--json] [TEXT]"
        case .call:
            return "call NAME [--id N] [--text TEXT | --bytes FILE|-] [--fd PATH]... [--oneway] [--timeout SECONDS] [--json]"
        case .monitor: return "monitor NAME|PREFIX*... [--json]"
        }
    }

    /// What `portname VERB --help` says below the synopsis.
    var details: String {
        switch self {
        case .list:
            return """
                Prints every registered name with its owner, sorted by name, one per line:
                NAME<TAB>PID<TAB>UID. With --json, one object per line:
                {"name": NAME, "pid": PID, "uid": UID}.
                At a cluster's node, the names other nodes hold follow the same shape with
                <TAB>NODE (with --json, "node": NODE) after it; PID is the owner's on its node.
                With --cluster URL (an etcd endpoint, http://HOST:PORT), prints every name the
                cluster's nodes publish there instead: NAME<TAB>NODE<TAB>PID, or with --json
                {"name": NAME, "node": NODE, "pid": PID}. An https://HOST:PORT directory is
                reached with --tls-cert, --tls-key and --tls-ca: a certificate etcd accepts from
                a client, its key, and the authority that issued etcd's.
                With --activatable, prints instead the names the server's service files
                declare (a lookup of one that is absent starts its service), one per line,
                sorted; with --json, {"name": NAME} per line.
                Exit status: 0; 5 no server (or no directory at URL).
                """
        case .lookup:
            return """
                Prints the pid of the process that holds NAME. With --wait, waits up to SECONDS
                (at most 86400) for NAME to be registered. With --json: {"name": NAME, "pid":
                PID, "uid": UID}.
                Exit status: 0 found; 1 not found (also after the wait); 2 invalid name or time;
                5 no server.
                """
        case .watch:
            return """
                Prints the names starting with PREFIX (every name without one) that are held
                now, then each change as it happens, one line each, flushed at once:
                "+ NAME PID UID" (registered) or "- NAME PID UID" (released, or its owner died),
                with " NODE" after it for a name another node of a cluster holds.
                With --json, one object per line:
                {"event": "appeared"|"vanished", "name": NAME, "pid": PID, "uid": UID, "initial": true|false}
                ("node": NODE before "initial" for a name on another node)
                ("initial" marks the names held when the watch began).
                When the name server restarts, the watch goes on at the new one: it prints
                what changed while the server was away (names gone, names registered
                meanwhile), then the new server's changes.
                Runs until interrupted. Exit status: 2 invalid prefix; 5 no server.
                """
        case .status:
            return """
                Prints what the server holds and has refused since it started, one
                "key: value" line each: address, pid, uptime (seconds), connections, names,
                watches, waiting_lookups, refused_connections, refused_requests. With --json,
                one object with the same keys.
                With NAME, prints what the server knows of NAME's owner instead, one
                "key: value" line each: name, pid, uid, gid, then where known executable
                (/proc/PID/exe), cgroup (/proc/PID/cgroup), unit (the systemd *.service of
                the cgroup), activatable and standbys (their pids). With --json, one object
                with the same keys ("standbys" a list of pids).
                Exit status: 0; 1 not found or refused; 2 invalid name; 5 no server.
                """
        case .serve:
            return """
                Registers NAME and answers every request sent to it (empty replies, or the
                request's bytes with --echo). Prints "serving NAME" once registered, then runs
                until killed; the name is released when it exits. When the name server
                restarts, it reconnects and registers NAME again (said on stderr). With
                --cluster, at a server that is a cluster's node, NAME is published to every
                node (else it stays on this host). With --queue, a NAME another process
                holds is waited for as a standby: it prints "queued for NAME", then
                "serving NAME" when the owner goes (standbys take over in the order they
                queued). With --replaceable, a later "serve NAME --replace" may take NAME
                (this one then exits 1); --replace takes NAME from such an owner.
                With --json, one object per line: {"event": "queued", ...} while queued,
                {"event": "serving", "name": NAME, "pid": PID} once registered, then
                {"event": "server_lost", "name": NAME} when the name server goes and
                {"event": "serving_again", "name": NAME, "pid": PID, "server_pid": PID}
                when NAME is registered again.
                Exit status: 1 name taken (also by another process while the server was
                away, by another node, or by a --replace); 2 invalid name; 5 no server.
                """
        case .send:
            return """
                Sends TEXT (empty without it) as a request with id N (default 0) to the port
                registered as NAME and prints the reply's bytes as text. --timeout bounds the
                send and the wait for the reply (default 10 seconds, at most 86400). With --json:
                {"name": NAME, "id": ID, "reply": TEXT} (ID: the reply's id).
                Exit status: 0; 1 not found; 2 invalid name or time; 3 timed out; 4 the owner died; 5 no server.
                It is `call NAME --text TEXT` with the reply printed as a line of text.
                """
        case .call:
            return """
                Sends a message with id N (default 0) to the port registered as NAME: one bytes
                component (TEXT with --text, the contents of FILE with --bytes, the standard
                input with --bytes -; empty otherwise), then each --fd PATH opened (read-write
                where allowed, else read-only) and sent as a descriptor component. A request
                by default: the reply's bytes are written to the standard output as they are
                (its descriptors are closed). With --oneway, a one-way message: nothing waits
                for a reply. --timeout bounds the send and the wait for the reply (default 10
                seconds, at most 86400). With --json, one line:
                {"name": NAME, "id": ID, "size": SIZE, "bytes": BASE64, "components": N,
                "descriptors": N} (ID: the reply's id), or for --oneway
                {"name": NAME, "id": ID, "sent": SIZE}.
                Exit status: 0; 1 not found or unreadable input; 2 usage; 3 timed out;
                4 the owner died; 5 no server.
                """
        case .monitor:
            return """
                Prints every message on the connections the server brokers to NAME (or to a
                name starting with PREFIX) while it runs, one line each, flushed at once:
                TIME NAME#CONNECTION ->|<- KIND id=ID corr=N pid=PID uid=UID size=BYTES [COMPONENTS]
                (TIME: seconds since the epoch; -> to the name, <- from it; KIND: opened,
                request, reply, message, no_reply, closed; corr ties a reply to its request).
                With --json, one object per line: {"time", "name", "connection", "event",
                "direction": "to"|"from", "id", "correlation", "pid", "uid", "gid", "size",
                "components", "reply_port"}, after a first {"event": "monitoring", "names": …}.
                Only connections looked up while it runs are seen. Only the names' owner's
                user and root may monitor them. Runs until interrupted.
                Exit status: 1 refused; 2 invalid name or prefix; 5 no server (or it went).
                """
        }
    }
}

/// The help texts.
enum Help {
    /// The usage line of one verb, or of every verb.
    static func synopsis(_ verb: Verb?) -> String {
        let verbs = verb.map { [$0] } ?? Verb.allCases
        return verbs.enumerated().map { index, verb in
            (index == 0 ? "usage: " : "       ") + "portname [--address PATH] \(verb.synopsis)"
        }.joined(separator: "\n")
    }

    /// How the address is found and what the exit statuses mean, for every help text.
    static let common = """
        Address: --address PATH, else $PORTKIT_NAME_SERVER, else
        $XDG_RUNTIME_DIR/portkit/names.sock, else /tmp/portkit-UID/names.sock
        (UID: your user id). This is where portnamed listens by default.

        Exit status: 0 success; 1 not found, or refused (name taken, permission denied);
        2 usage error (an invalid name included); 3 timed out; 4 the peer died;
        5 no name server answers at the address.
        """

    /// `portname --help`.
    static var general: String {
        """
        \(synopsis(nil))
               portname --help | --version | VERB --help | help VERB

        Lists, looks up and watches the names a PortKit name server holds, serves, calls or
        sends to a named port, and monitors the messages to named ports. Names are 1 to 255 bytes of UTF-8 without whitespace,
        control characters or '/'.

        \(common)
        """
    }

    /// `portname VERB --help`.
    static func verb(_ verb: Verb) -> String {
        "\(synopsis(verb))\n\n\(verb.details)\n\n\(common)"
    }

    static var version: String { "portname \(NamedPortServerModule.version)" }
}
