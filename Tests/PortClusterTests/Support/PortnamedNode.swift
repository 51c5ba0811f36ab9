import Foundation
import Glibc
import PortKitTestSupport
import PortMessaging
import Testing

/// A `portnamed --etcd … --node NAME` in a private directory of its own, a real process;
/// with `listen`, its gateway takes connections from other hosts at the port it prints.
final class PortnamedNode {
    let name: String
    let directory = TestDirectory()
    let address: String
    let daemon: SpawnedProcess
    /// Where its gateway listens (with `listen`).
    let gateway: PortAddress?

    init(_ name: String, etcd: EtcdServer, leaseTTL: Int = 2, listen: String? = nil, extra: [String] = []) throws {
        self.name = name
        address = directory.address
        var arguments = [
            "--address", address, "--etcd", etcd.endpoint, "--node", name, "--lease-ttl", String(leaseTTL), "--log-level", "debug",
        ]
        if let listen { arguments += ["--listen", listen] }
        daemon = try SpawnedProcess.spawn(SpawnedProcess.product("portnamed"), arguments + extra)
        if listen != nil {
            let line = try daemon.readLine(within: .seconds(60))
            gateway = line.hasPrefix("gateway on ") ? PortAddress(tcp: String(line.dropFirst("gateway on ".count))) : nil
            #expect(gateway != nil, "portnamed printed \(line)")
        } else {
            gateway = nil
        }
        #expect(try daemon.readLine(within: .seconds(60)) == "listening on \(address)")
    }

    /// `portname serve NAME` on this node (answering with the request's bytes when
    /// `echo`; with cluster scope unless `hostOnly`), once it serves.
    func serve(_ name: String, echo: Bool = false, hostOnly: Bool = false) throws -> SpawnedProcess {
        let child = try SpawnedProcess.spawn(
            SpawnedProcess.product("portname"),
            ["--address", address, "serve", name] + (echo ? ["--echo"] : []) + (hostOnly ? [] : ["--cluster"]))
        #expect(try child.readLine(within: .seconds(60)) == "serving \(name)")
        return child
    }

    deinit {
        daemon.kill()
    }
}
