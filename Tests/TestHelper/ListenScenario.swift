import Glibc
import PortMessaging

/// `port-connect PATH|@NAME`: connects to the port listening there, sends the request
/// "hello", and prints "pid=PID reply=TEXT sender=PID" (its own pid, the reply, and who
/// the reply says sent it), or "error …".
@Sendable func portConnect(_ arguments: [String]) -> Int32 {
    guard let target = arguments.first else {
        say("usage: port-connect PATH|@NAME")
        return 2
    }
    let address: PortAddress = target.hasPrefix("@") ? .abstract(String(target.dropFirst())) : .path(target)
    do {
        let port = try SendPort.connect(to: address)
        let reply = try port.blockingRequest(Message(id: 1, text: "hello"), receiveTimeout: .seconds(60))
        say("pid=\(getpid()) reply=\(reply.text) sender=\(reply.sender?.pid ?? -1)")
        return 0
    } catch {
        say("error \(error)")
        return 1
    }
}
