// portactors-test-helper: the actor systems the PortActorsTests call from another process,
// kill and watch. Usage:
//
//   portactors-test-helper serve ADDRESS NAME [--cluster]
//
// makes a `PortActorSystem` connected (reconnecting) to the name server at ADDRESS, a
// `Worker` on a permanent thread of its own registered as NAME (cluster scope with
// `--cluster`) and a `Recorder` on the default executor registered as NAME.recorder, then
// prints "serving NAME PID". What the worker reports (a call waiting, a cancellation) is
// printed as a line. Then, per line on stdin: "unregister" releases NAME and prints
// "unregistered". Ends at stdin's end.
import Glibc
import PermanentThread
import PortActors
import PortActorsTestActors

/// Writes a line to standard output at once (one `write`, no buffer).
func say(_ line: String) {
    var bytes = Array((line + "\n").utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return }
        bytes = bytes.dropFirst(written)
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 3, arguments[0] == "serve" else {
    say("usage: portactors-test-helper serve ADDRESS NAME [--cluster]")
    exit(2)
}
let (address, name) = (arguments[1], arguments[2])
do {
    let system = try PortActorSystem(nameServerAt: address)
    let thread = PermanentThread(name: "worker")
    try thread.run()
    let worker = Worker(actorSystem: system, thread: thread, report: { say($0) })
    let recorder = Recorder(actorSystem: system)
    let scope: NameScope = arguments.contains("--cluster") ? .cluster : .host
    try await system.register(worker, as: name, scope: scope)
    try await system.register(recorder, as: name + ".recorder", scope: scope)
    say("serving \(name) \(getpid())")
    while let line = readLine() {
        switch line {
        case "unregister":
            try await system.unregister(name)
            say("unregistered")
        default: say("unknown command \(line)")
        }
    }
    system.shutDown()
} catch {
    say("error \(error)")
    exit(1)
}
