import Glibc
import PortMessaging
import PortKitLocks

/// `port-tcp PORT [stay]`: connects over plain TCP to the port listening at
/// 127.0.0.1:PORT, sends the request "hello" and then the one-way messages "one-way 1" to
/// "one-way 3", then listens itself at 127.0.0.1 on a port the kernel chooses, and prints
/// "pid=PID reply=TEXT sender=PID port=PORT" (its own pid, the reply, who the reply says
/// sent it (-1: no one), the port it listens on), or "error …". With `stay`, it then
/// serves that port until it is killed: a request of id 1 is answered "pong", one of id 2
/// is kept unanswered (and "kept" printed); without, it exits.
@Sendable func portTCP(_ arguments: [String]) -> Int32 {
    guard let text = arguments.first, let parentPort = UInt16(text) else {
        say("usage: port-tcp PORT [stay]")
        return 2
    }
    do {
        let parent = try SendPort.connect(to: .tcp(host: "127.0.0.1", port: parentPort), security: .plainLoopbackOnly)
        let reply = try parent.blockingRequest(Message(id: 1, text: "hello"), receiveTimeout: .seconds(60))
        for index in 1...3 { try parent.send(Message(id: 2, text: "one-way \(index)"), timeout: .seconds(30)) }
        let loop = ThreadLoop.current
        let port = ReceivePort()
        let kept = Locked<[PendingReply]>([])
        try port.schedule(on: loop) { message, pending in
            guard let pending else { return }
            if message.id == 2 {
                kept.withLock { $0.append(pending) }
                say("kept")
            } else {
                pending.reply(Message(id: 1, text: "pong"))
            }
        }
        try port.listen(at: .tcp(host: "127.0.0.1", port: 0), security: .plainLoopbackOnly)
        guard case .tcp(_, let mine)? = port.listeningAddress else { return 1 }
        say("pid=\(getpid()) reply=\(reply.text) sender=\(reply.sender?.pid ?? -1) port=\(mine)")
        guard arguments.contains("stay") else { return 0 }
        // The connection to the parent stays open until the process dies.
        try withExtendedLifetime(parent) { try loop.run() }
        return 0
    } catch {
        say("error \(error)")
        return 1
    }
}
