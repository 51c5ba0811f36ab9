import NamedPortServer
import PortMessaging

extension NameBenchmarks {
    /// The bytes of a `names.call` request and of its reply, as `raw`'s requests.
    static let callSize = 32

    /// `names.call`: a request to a named owner and its reply, once the name is looked up:
    /// PortKit's send port from `lookup` (a connection of its own to the owner), the same
    /// while a monitor watches the name (`portkit-monitored`, through the server's tap), against
    /// `raw`, one bare request/response over a connected Unix socket, and `dbus`, a method
    /// call to the owner's name through the bus.
    static func call(count: Int) -> BenchmarkCase {
        let request = Message(id: 1, bytes: PortBenchmarks.payload(callSize))
        return BenchmarkCase(name: "names.call", unit: "µs", impls: [
            lookedUpCall("portkit", count: count, request, monitored: false),
            lookedUpCall("portkit-monitored", count: count, request, monitored: true),
            rawRequest(count: count),
            DBusBenchmarks.call(count: count, size: callSize),
        ])
    }
}
