import FoundationEssentials

/// One call to etcd's JSON gateway: where it goes, what it sends, and what its answer
/// says. `EtcdClient` makes it blocking; a loop makes it through an `HTTPLoopDriver`
/// (`EtcdClient.perform(_:on:completion:)`). One definition for both.
struct EtcdCall<Value> {
    /// The gateway's path.
    var path: String
    /// The request's JSON.
    var request: JSONValue
    /// What the answer's JSON object says.
    var read: (JSONValue) throws(DirectoryError) -> Value
}

extension EtcdCall where Value == (entry: DirectoryEntry?, revision: Int64) {
    static func get(_ key: String) -> Self {
        EtcdCall(path: "/v3/kv/range", request: ["key": .string(EtcdClient.base64(key))]) { (answer) throws(DirectoryError) in
            (try EtcdClient.entries(answer["kvs"]).first, try EtcdClient.revision(answer))
        }
    }
}

extension EtcdCall where Value == (entries: [DirectoryEntry], revision: Int64) {
    static func list(prefix: String) -> Self {
        EtcdCall(path: "/v3/kv/range", request: [
            "key": .string(EtcdClient.base64(prefix)), "range_end": .string(EtcdClient.prefixEnd(prefix)),
        ]) { (answer) throws(DirectoryError) in (try EtcdClient.entries(answer["kvs"]), try EtcdClient.revision(answer)) }
    }
}

extension EtcdCall where Value == Int64 {
    static func put(_ key: String, value: [UInt8], lease: Int64) -> Self {
        var request: [String: JSONValue] = ["key": .string(EtcdClient.base64(key)), "value": .string(Data(value).base64EncodedString())]
        if lease != 0 { request["lease"] = .string(String(lease)) }
        return EtcdCall(path: "/v3/kv/put", request: .object(request)) { (answer) throws(DirectoryError) in try EtcdClient.revision(answer) }
    }
}

extension EtcdCall where Value == DirectoryClaim {
    static func create(_ key: String, value: [UInt8], lease: Int64) -> Self {
        var put: [String: JSONValue] = ["key": .string(EtcdClient.base64(key)), "value": .string(Data(value).base64EncodedString())]
        if lease != 0 { put["lease"] = .string(String(lease)) }
        return EtcdCall(path: "/v3/kv/txn", request: [
            "compare": [["key": .string(EtcdClient.base64(key)), "target": "CREATE", "result": "EQUAL", "create_revision": "0"]],
            "success": [["request_put": .object(put)]],
            "failure": [["request_range": ["key": .string(EtcdClient.base64(key))]]],
        ]) { (answer) throws(DirectoryError) in
            if answer["succeeded"]?.bool == true { return .created(revision: try EtcdClient.revision(answer)) }
            let range = answer["responses"]?.array?.first?["response_range"]
            guard let holder = try EtcdClient.entries(range?["kvs"]).first else {
                // Deleted between the compare and the range: free again; the caller may retry.
                throw .refused(code: 10, message: "the key changed during the claim; try again")
            }
            return .taken(holder)
        }
    }
}

extension EtcdCall where Value == Bool {
    static func delete(_ key: String) -> Self {
        EtcdCall(path: "/v3/kv/deleterange", request: ["key": .string(EtcdClient.base64(key))]) { answer in
            answer["deleted"]?.int64 ?? 0 > 0
        }
    }

    static func delete(_ key: String, ifOnLease lease: Int64) -> Self {
        EtcdCall(path: "/v3/kv/txn", request: [
            "compare": [["key": .string(EtcdClient.base64(key)), "target": "LEASE", "result": "EQUAL", "lease": .string(String(lease))]],
            "success": [["request_delete_range": ["key": .string(EtcdClient.base64(key))]]],
        ]) { answer in answer["succeeded"]?.bool == true }
    }
}

extension EtcdCall where Value == DirectoryLease {
    static func grantLease(ttl: Int) -> Self {
        EtcdCall(path: "/v3/lease/grant", request: ["TTL": .string(String(ttl))]) { (answer) throws(DirectoryError) in
            guard let id = answer["ID"]?.int64, let granted = answer["TTL"]?.int64 else {
                throw .malformedAnswer("a lease grant without ID and TTL")
            }
            return DirectoryLease(id: id, ttl: Int(granted))
        }
    }
}

extension EtcdCall where Value == Int {
    static func keepAlive(_ lease: Int64) -> Self {
        EtcdCall(path: "/v3/lease/keepalive", request: ["ID": .string(String(lease))]) { (answer) throws(DirectoryError) in
            // The gateway streams keep-alive answers: one message, `result`.
            let result = answer["result"] ?? answer
            guard let ttl = result["TTL"]?.int64, ttl > 0 else { throw .leaseNotFound(lease) }
            return Int(ttl)
        }
    }
}

extension EtcdCall where Value == Void {
    static func revoke(_ lease: Int64) -> Self {
        EtcdCall(path: "/v3/lease/revoke", request: ["ID": .string(String(lease))]) { _ in }
    }
}
