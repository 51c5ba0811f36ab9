// named-port-server: registers a port under a name and answers requests sent to it.
//
//   named-port-server [NAME] [--address PATH]      (NAME defaults to "example.greeter")
//
// It uses the user's name server (the default address, or PATH). If none is running it
// starts one inside this process, which then serves other processes too, for as long as
// this one runs. Try it with the client beside it, or with `portname send NAME TEXT`.
// Across a restart of `portnamed` it keeps serving: it prints the registration's states
// (`server lost`, `registered again`) and exits if another process took the name meanwhile.
import Glibc
import NamedPortServer

var arguments = Array(CommandLine.arguments.dropFirst())
var address: String?
if let index = arguments.firstIndex(of: "--address"), index + 1 < arguments.count {
    address = arguments[index + 1]
    arguments.removeSubrange(index...index + 1)
}
let name = arguments.first ?? "example.greeter"

do {
    // This thread's loop serves the port and watches the name server: if a `portnamed`
    // serving us restarts, the client reconnects and registers the name again.
    let loop = ThreadLoop.current
    let names = try NameServerClient.blockingConnect(to: address, startingServerIfNeeded: true, reconnectingOn: loop)

    // The port's handler runs on this thread's loop; what it returns is the reply.
    let port = ReceivePort()
    try port.schedule(on: loop) { request in
        Message(id: request.id, text: "hello, \(request.text)! (from process \(getpid()))")
    }

    // The name is ours until this process ends (SIGKILL included) or we unregister it.
    let registration = try names.blockingRegister(name, port: port)
    registration.onStateChange(on: loop) { state in
        print("\(name): \(state)")
        fflush(nil)
        if state.isFinal { exit(1) }
    }
    let host = names.serverPID == getpid() ? "a name server inside this process" : "the name server, pid \(names.serverPID)"
    print("serving \(name) through \(host) at \(names.address)")
    fflush(nil)

    // Nothing signals this source: it keeps the loop running whatever the port does.
    try loop.add(LoopSource(perform: {}), forMode: .default)
    try withExtendedLifetime(names) { try loop.run() }
} catch {
    print("named-port-server: \(error)")
    exit(1)
}
