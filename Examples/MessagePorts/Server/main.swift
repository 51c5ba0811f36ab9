// message-port-server: a CFMessagePort-style local port in PortKit, step for step.
//
//   message-port-server [NAME] [--requests N]   (defaults: "com.example.portkit.echo", run for ever)
//
// On Darwin this program would be:
//
//   CFMessagePortRef local = CFMessagePortCreateLocal(NULL, CFSTR(NAME), callback, &context, NULL);
//   CFRunLoopSourceRef source = CFMessagePortCreateRunLoopSource(NULL, local, 0);
//   CFRunLoopAddSource(CFRunLoopGetCurrent(), source, kCFRunLoopDefaultMode);
//   CFRunLoopRun();
//
// with a callback that answers each request (msgid, data) with a reply's data. Here the
// port's name is a Linux abstract socket name, the callback is the port's handler, and the
// current thread's loop runs it. `--requests N` stops after N requests (for scripts).
import Glibc
import PortMessaging
import PortKitLocks

var arguments = Array(CommandLine.arguments.dropFirst())
var requests: Int?
if let index = arguments.firstIndex(of: "--requests"), index + 1 < arguments.count {
    requests = Int(arguments[index + 1])
    arguments.removeSubrange(index...index + 1)
}
let limit = requests
let name = arguments.first ?? "com.example.portkit.echo"

/// The message ids the client sends (the callback's `msgid`).
enum MessageID {
    static let uppercase: UInt32 = 1
    static let count: UInt32 = 2
}

// CFMessagePortCreateLocal(NULL, name, callback, …): a port with a name others can reach.
let local = ReceivePort()
do {
    try local.listen(at: .abstract(name))
} catch .addressInUse {
    print("message-port-server: another port is named \(name)")
    exit(1)
} catch {
    print("message-port-server: \(error)")
    exit(1)
}

// The context the callback keeps: how many requests it answered.
let answered = Locked(0)
let loop = ThreadLoop.current

// CFMessagePortCreateRunLoopSource + CFRunLoopAddSource(…, kCFRunLoopDefaultMode): the
// handler is the callback; what it returns is the reply's data.
try local.schedule(on: loop, inModes: [.default]) { request in
    let count = answered.withLock { count -> Int in
        count += 1
        return count
    }
    let reply: Message
    switch request.id {
    case MessageID.uppercase: reply = Message(id: request.id, text: request.text.uppercased())
    case MessageID.count: reply = Message(id: request.id, text: "\(count)")
    default: reply = Message(id: request.id, text: "unknown message id \(request.id)")
    }
    if let limit, count >= limit { loop.stop() }
    return reply
}

print("message-port-server: listening as \(name)")
fflush(nil)  // whoever waits for this line (a script, a test) sees it now
// CFRunLoopRun(): until stopped (after `--requests N`) or killed.
_ = try? loop.run()
local.invalidate()
print("message-port-server: answered \(answered.withLock { $0 }) requests")
