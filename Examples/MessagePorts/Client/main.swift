// message-port-client: a CFMessagePort-style remote port in PortKit, step for step.
//
//   message-port-client [NAME] [TEXT]   (defaults: "com.example.portkit.echo", "hello")
//
// On Darwin this program would be:
//
//   CFMessagePortRef remote = CFMessagePortCreateRemote(NULL, CFSTR(NAME));
//   CFDataRef reply = NULL;
//   SInt32 status = CFMessagePortSendRequest(remote, 1, data, 1.0, 1.0, kCFRunLoopDefaultMode, &reply);
//   CFMessagePortInvalidate(remote);
//
// Here the remote port is a send port connected to the server's listening port; the
// request is a message whose id is the msgid; a status other than success is a PortError.
import Glibc
import PortMessaging

let arguments = Array(CommandLine.arguments.dropFirst())
let name = arguments.first ?? "com.example.portkit.echo"
let text = arguments.dropFirst().first ?? "hello"

do {
    // CFMessagePortCreateRemote(NULL, name)
    let remote = try SendPort.connect(to: .abstract(name))
    // CFMessagePortSendRequest(remote, 1, data, 1.0, 1.0, kCFRunLoopDefaultMode, &reply)
    let reply = try remote.blockingRequest(Message(id: 1, text: text), sendTimeout: .seconds(1), receiveTimeout: .seconds(1))
    // A second request, msgid 2: how many the server has answered.
    let count = try remote.blockingRequest(Message(id: 2), sendTimeout: .seconds(1), receiveTimeout: .seconds(1))
    print("\(name) answered: \(reply.text); requests it has answered: \(count.text)")
    // CFMessagePortInvalidate(remote)
    remote.invalidate()
} catch .noListener {
    // CFMessagePortCreateRemote returned NULL.
    print("message-port-client: no port is named \(name); start message-port-server first")
    exit(5)
} catch .sendTimedOut, .receiveTimedOut {
    // kCFMessagePortSendTimeout / kCFMessagePortReceiveTimeout
    print("message-port-client: \(name) did not answer in time")
    exit(3)
} catch {
    // kCFMessagePortIsInvalid, kCFMessagePortTransportError, …
    print("message-port-client: \(error)")
    exit(1)
}
