import Glibc
import PortCluster
import PortMessaging

/// `port-tls PORT CERTIFICATE KEY AUTHORITY`: connects to the port listening at
/// 127.0.0.1:PORT over TCP secured by `ClusterTLS` made from the three PEM files, sends
/// the request "hello" and then the one-way messages "one-way 1" to "one-way 3", prints
/// "reply=TEXT identity=NAME" (the reply, and the server's verified name), or "error …",
/// and exits.
@Sendable func portTLS(_ arguments: [String]) -> Int32 {
    guard arguments.count == 4, let serverPort = UInt16(arguments[0]) else {
        say("usage: port-tls PORT CERTIFICATE KEY AUTHORITY")
        return 2
    }
    do {
        let tls = try ClusterTLS(certificate: arguments[1], privateKey: arguments[2], authority: arguments[3])
        let server = try SendPort.connect(to: .tcp(host: "127.0.0.1", port: serverPort), security: .secured(by: tls), timeout: .seconds(60))
        let reply = try server.blockingRequest(Message(id: 1, text: "hello"), receiveTimeout: .seconds(60))
        for index in 1...3 { try server.send(Message(id: 2, text: "one-way \(index)"), timeout: .seconds(30)) }
        say("reply=\(reply.text) identity=\(server.remoteIdentity ?? "-")")
        server.invalidate()
        return 0
    } catch {
        say("error \(error)")
        return 1
    }
}
