// named-port-client: finds a port by name and sends it a request.
//
//   named-port-client [NAME] [TEXT] [--address PATH]   (defaults: "example.greeter", "world")
//
// The client may start before the server: it gives the name server and then the name up
// to 10 seconds each to appear (the connect watches the address's directory, the lookup
// waits inside the name server: no polling).
// What comes back is a send port already connected to the server's port; the name server
// is not in the path of the request.
import Glibc
import NamedPortServer

var arguments = Array(CommandLine.arguments.dropFirst())
var address: String?
if let index = arguments.firstIndex(of: "--address"), index + 1 < arguments.count {
    address = arguments[index + 1]
    arguments.removeSubrange(index...index + 1)
}
let name = arguments.first ?? "example.greeter"
let text = arguments.dropFirst().first ?? "world"

do {
    let names = try NameServerClient.blockingConnect(to: address, waitingForServer: .seconds(10))
    let owner = try names.blockingOwner(of: name, waitingUpTo: .seconds(10))
    let port = try names.blockingLookup(name)
    let reply = try port.blockingRequest(Message(id: 1, text: text), sendTimeout: .seconds(5), receiveTimeout: .seconds(5))
    print("\(name) (pid \(owner.pid)) answered: \(reply.text)")
    port.invalidate()
} catch NameServerError.serverUnavailable(let address, _) {
    print("named-port-client: no name server at \(address); start named-port-server (or portnamed) first")
    exit(5)
} catch {
    print("named-port-client: \(error)")
    exit(1)
}
