import FoundationEssentials
import PermanentThread
import PortMessaging
import PortKitLocks

/// A client of an etcd v3 server through its JSON gateway (`/v3/kv/*`, `/v3/lease/*`,
/// `/v3/watch`) over HTTP/1.1, plain or over TLS: the cluster's directory.
///
/// ```swift
/// let etcd = try EtcdClient(endpoint: "http://127.0.0.1:2379")
/// let lease = try etcd.grantLease(ttl: 5)
/// switch try etcd.create("portkit/names/db", value: owner, lease: lease.id) {
/// case .created: break                       // the name is ours, cluster-wide
/// case .taken(let holder): print(holder)     // someone else's, since holder.createRevision
/// }
/// _ = try etcd.keepAlive(lease.id)           // well within the lease's time to live
/// ```
///
/// Every call blocks its thread until etcd answers, for at most `timeout`. Calls from several
/// threads take turns on one kept-alive connection; a watch has a connection of its own.
/// Keys are UTF-8 strings; etcd's 64-bit integers (revisions, lease ids) are `Int64`.
public final class EtcdClient: Sendable {
    /// The endpoint, `http://HOST:PORT` or `https://HOST:PORT`.
    public let endpoint: String
    /// How long a call waits for etcd.
    public let timeout: Duration
    let host: String
    let port: UInt16
    /// What secures every connection to an `https://` endpoint; `nil` for `http://`.
    let security: (any StreamSecurity)?
    private let connection: Locked<HTTPConnection>

    /// A client of the etcd server at `endpoint` (`http://HOST:PORT`, or `https://HOST:PORT`
    /// with a `security`; `HOST` a name, an IPv4 address or a bracketed IPv6 one). Connects
    /// on the first call.
    /// - Parameters:
    ///   - endpoint: the etcd server's client URL.
    ///   - security: for an `https://` endpoint, what secures the connections: a
    ///     `ClusterTLS` whose authority issued etcd's certificate, and whose certificate
    ///     etcd accepts as a client's (`--client-cert-auth`). Not used over `http://`.
    ///   - timeout: how long a call waits for etcd.
    /// - Throws: `.invalidEndpoint`: not such a URL, or an `https://` one without a security.
    public init(endpoint: String, security: (any StreamSecurity)? = nil, timeout: Duration = .seconds(5)) throws(DirectoryError) {
        let secured = endpoint.hasPrefix("https://")
        guard endpoint.hasPrefix("http://") || (secured && security != nil) else { throw .invalidEndpoint(endpoint) }
        var rest = endpoint.dropFirst(secured ? "https://".count : "http://".count)
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard let colon = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: colon)...]), port != 0 else {
            throw .invalidEndpoint(endpoint)
        }
        var host = String(rest[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw .invalidEndpoint(endpoint) }
        self.endpoint = endpoint
        self.timeout = timeout
        self.host = host
        self.port = port
        self.security = secured ? security : nil
        connection = Locked(HTTPConnection(host: host, port: port, security: self.security))
    }

    // MARK: Keys

    /// The entry at `key`, and the directory's revision when it was read.
    public func get(_ key: String) throws(DirectoryError) -> (entry: DirectoryEntry?, revision: Int64) {
        try perform(.get(key))
    }

    /// Every entry whose key begins with `prefix`, in key order, and the directory's
    /// revision when they were read (a watch from the next revision misses nothing).
    public func list(prefix: String) throws(DirectoryError) -> (entries: [DirectoryEntry], revision: Int64) {
        try perform(.list(prefix: prefix))
    }

    /// Sets `key` to `value`, on `lease` (0: none); the revision of the change.
    @discardableResult
    public func put(_ key: String, value: [UInt8], lease: Int64 = 0) throws(DirectoryError) -> Int64 {
        try perform(.put(key, value: value, lease: lease))
    }

    /// Creates `key` with `value` on `lease` only if no one holds it (one transaction on
    /// the key's create revision): what makes a name unique in the cluster.
    public func create(_ key: String, value: [UInt8], lease: Int64 = 0) throws(DirectoryError) -> DirectoryClaim {
        try perform(.create(key, value: value, lease: lease))
    }

    /// Deletes `key`; whether it was there.
    @discardableResult
    public func delete(_ key: String) throws(DirectoryError) -> Bool {
        try perform(.delete(key))
    }

    /// Deletes `key` only while it is on `lease` (another node's key of the same name is
    /// left alone); whether it was deleted.
    @discardableResult
    public func delete(_ key: String, ifOnLease lease: Int64) throws(DirectoryError) -> Bool {
        try perform(.delete(key, ifOnLease: lease))
    }

    // MARK: Leases

    /// A new lease of `ttl` seconds.
    public func grantLease(ttl: Int) throws(DirectoryError) -> DirectoryLease {
        try perform(.grantLease(ttl: ttl))
    }

    /// Renews `lease`; its time to live from now, in seconds.
    /// - Throws: `.leaseNotFound` when it has expired or was revoked (its keys are gone).
    @discardableResult
    public func keepAlive(_ lease: Int64) throws(DirectoryError) -> Int {
        try perform(.keepAlive(lease))
    }

    /// Revokes `lease`: every key on it is deleted at once.
    public func revoke(_ lease: Int64) throws(DirectoryError) {
        try perform(.revoke(lease))
    }

    // MARK: Watching

    /// Watches every key that begins with `prefix`, from `revision` (a `list`'s revision
    /// plus one gives its entries' changes with no gap).
    public func watch(prefix: String, fromRevision revision: Int64) throws(DirectoryError) -> EtcdWatch {
        try EtcdWatch(client: self, prefix: prefix, fromRevision: revision)
    }

    // MARK: The gateway

    /// Makes `call`, blocking until etcd answers (at most `timeout`).
    func perform<Value>(_ call: EtcdCall<Value>) throws(DirectoryError) -> Value {
        let body = call.request.bytes
        let deadline = ContinuousClock.now + timeout
        let response = try connection.withLock { (http) throws(DirectoryError) -> HTTPConnection.Response in
            do throws(HTTPFailure) { return try http.post(call.path, body: body, deadline: deadline) } catch {
                throw .unavailable(endpoint: endpoint, reason: error.description)
            }
        }
        return try call.read(try answer(response, to: call.request))
    }

    /// Makes `call` through `driver` (on its loop, never waiting): `completion` is called
    /// there with what etcd said, or why it said nothing in the driver's time-out.
    func perform<Value>(
        _ call: EtcdCall<Value>, on driver: HTTPLoopDriver, completion: @escaping (Result<Value, DirectoryError>) -> Void
    ) {
        driver.send(call.path, body: call.request.bytes) { [endpoint] result in
            switch result {
            case .failure(let failure):
                completion(.failure(.unavailable(endpoint: endpoint, reason: failure.description)))
            case .success(let response):
                completion(Result { () throws(DirectoryError) in try call.read(try self.answer(response, to: call.request)) })
            }
        }
    }

    /// A driver of a connection to this client's etcd, on `loop`, with its time-out.
    func loopDriver(on loop: ThreadLoop) -> HTTPLoopDriver {
        HTTPLoopDriver(host: host, port: port, security: security, loop: loop, timeout: timeout)
    }

    /// The JSON object of `response` to `request`, or the error etcd answered with.
    private func answer(_ response: HTTPConnection.Response, to request: JSONValue) throws(DirectoryError) -> JSONValue {
        let object = try Self.decode(response.body)
        if response.status != 200 || object["error"] != nil {
            let text = object["message"]?.string ?? object["error"]?.string ?? "HTTP status \(response.status)"
            let code = Int(object["code"]?.int64 ?? 2)
            if text.contains("requested lease not found"), let lease = request["ID"]?.int64 ?? request["lease"]?.int64 {
                throw .leaseNotFound(lease)
            }
            throw .refused(code: code, message: text)
        }
        return object
    }

    /// The JSON object the bytes of an answer hold.
    static func decode(_ bytes: [UInt8]) throws(DirectoryError) -> JSONValue {
        let value = try JSONValue.parse(bytes)
        guard case .object = value else { throw .malformedAnswer("not a JSON object") }
        return value
    }

    static func base64(_ text: String) -> String { Data(text.utf8).base64EncodedString() }

    /// The end of the range of keys that begin with `prefix` (etcd's `range_end`): the
    /// prefix with its last byte below 0xFF raised by one; every key for an empty prefix.
    static func prefixEnd(_ prefix: String) -> String {
        var bytes = Array(prefix.utf8)
        while let last = bytes.last, last == 0xFF { bytes.removeLast() }
        guard !bytes.isEmpty else { return Data([0]).base64EncodedString() }
        bytes[bytes.count - 1] += 1
        return Data(bytes).base64EncodedString()
    }

    static func revision(_ answer: JSONValue) throws(DirectoryError) -> Int64 {
        guard let revision = answer["header"]?["revision"]?.int64 else {
            throw .malformedAnswer("an answer without a revision")
        }
        return revision
    }

    static func entry(_ kv: JSONValue?) throws(DirectoryError) -> DirectoryEntry {
        guard let keyText = kv?["key"]?.string, let key = Data(base64Encoded: keyText) else {
            throw .malformedAnswer("a key-value without a key")
        }
        let bytes = kv?["value"]?.string.flatMap { Data(base64Encoded: $0) } ?? Data()
        return DirectoryEntry(
            key: String(decoding: key, as: UTF8.self), value: Array(bytes),
            createRevision: kv?["create_revision"]?.int64 ?? 0, modRevision: kv?["mod_revision"]?.int64 ?? 0,
            lease: kv?["lease"]?.int64 ?? 0)
    }

    static func entries(_ value: JSONValue?) throws(DirectoryError) -> [DirectoryEntry] {
        guard let list = value?.array else { return [] }
        var result: [DirectoryEntry] = []
        for item in list { result.append(try entry(item)) }
        return result
    }
}
