/// A watch on every key under a prefix: each change from a revision on, in revision order,
/// none missed and none twice, across reconnections to etcd.
///
/// ```swift
/// let (entries, revision) = try etcd.list(prefix: "portkit/names/")
/// let watch = try etcd.watch(prefix: "portkit/names/", fromRevision: revision + 1)
/// while true {
///     for change in try watch.next(timeout: .seconds(1)) { apply(change) }
/// }
/// ```
///
/// When the stream breaks (etcd restarted, the network went), `next` throws
/// `.unavailable`; the next call opens the stream again from `nextRevision`, the revision
/// after the last change it returned, which etcd's watch guarantees gives the rest with no
/// gap (unless that revision has been compacted away: `.compacted`).
///
/// One thread at a time uses a watch; it holds a connection of its own.
public final class EtcdWatch {
    /// The prefix watched.
    public let prefix: String
    /// The revision the watch goes on from: one past the last change `next` returned.
    public private(set) var nextRevision: Int64
    private let endpoint: String
    private let http: HTTPConnection
    private let timeout: Duration
    private var streaming = false

    init(client: EtcdClient, prefix: String, fromRevision revision: Int64) throws(DirectoryError) {
        self.prefix = prefix
        nextRevision = revision
        endpoint = client.endpoint
        timeout = client.timeout
        http = HTTPConnection(host: client.host, port: client.port, security: client.security)
        try open()
    }

    deinit { http.close() }

    /// The socket the watch reads, while its stream is open: a loop may wait for it to be
    /// readable and then call `next(timeout: .zero)`.
    public var descriptor: CInt? { streaming ? http.descriptor : nil }

    /// Stops watching (the connection closes); a later `next` opens the stream again.
    public func cancel() {
        http.close()
        streaming = false
    }

    /// The changes that came, waiting up to `timeout` for the first; empty when none came.
    /// Once some came, every other change already received comes with them: a caller that
    /// waits for the socket to be readable before it asks again (`descriptor`) would not be
    /// woken for messages a read left in the connection's buffer.
    /// - Throws: `.unavailable` when the stream broke or cannot be opened again (call again
    ///   later: it resumes from `nextRevision`), `.compacted`, `.malformedAnswer`.
    public func next(timeout wait: Duration) throws(DirectoryError) -> [DirectoryChange] {
        if !streaming { try open() }
        var deadline = ContinuousClock.now + wait
        var changes: [DirectoryChange] = []
        while true {
            let message: [UInt8]?
            do { message = try http.nextMessage(deadline: deadline) } catch {
                // The changes read before the stream broke first; the next call says it broke.
                if !changes.isEmpty { return changes }
                cancel()
                throw .unavailable(endpoint: endpoint, reason: error.description)
            }
            guard let message else { return changes }
            changes += try read(message)
            if !changes.isEmpty { deadline = .now }  // from now on, only what is here already
        }
    }

    // MARK: The stream

    private func open() throws(DirectoryError) {
        let body = Self.request(prefix: prefix, fromRevision: nextRevision).bytes
        let deadline = ContinuousClock.now + timeout
        do {
            let status = try http.startStream("/v3/watch", body: body, deadline: deadline)
            guard status == 200 else {
                http.close()
                throw DirectoryError.refused(code: 2, message: "watch: HTTP status \(status)")
            }
            // The first message says the watch was created.
            guard let first = try http.nextMessage(deadline: deadline) else {
                http.close()
                throw DirectoryError.unavailable(endpoint: endpoint, reason: "the watch was not created in time")
            }
            streaming = true
            _ = try read(first)
        } catch let error as DirectoryError {
            throw error
        } catch let error as HTTPFailure {
            http.close()
            throw .unavailable(endpoint: endpoint, reason: error.description)
        } catch {
            http.close()
            throw .unavailable(endpoint: endpoint, reason: "\(error)")
        }
    }

    /// The changes one stream message carries (none for a creation or progress message).
    private func read(_ message: [UInt8]) throws(DirectoryError) -> [DirectoryChange] {
        let changes: [DirectoryChange]
        do { changes = try Self.changes(in: message) } catch {
            if case .malformedAnswer = error {} else { cancel() }
            throw error
        }
        for change in changes { nextRevision = max(nextRevision, change.revision + 1) }
        return changes
    }

    /// The request that opens a watch on `prefix` from `revision`.
    static func request(prefix: String, fromRevision revision: Int64) -> JSONValue {
        ["create_request": [
            "key": .string(EtcdClient.base64(prefix)), "range_end": .string(EtcdClient.prefixEnd(prefix)),
            "start_revision": .string(String(revision)),
        ]]
    }

    /// The changes a stream message carries (none for a creation or progress message).
    /// - Throws: `.refused` or `.compacted` when the message says the watch ended,
    ///   `.malformedAnswer`.
    static func changes(in message: [UInt8]) throws(DirectoryError) -> [DirectoryChange] {
        let object = try EtcdClient.decode(message)
        if let error = object["error"], case .object = error {
            throw .refused(code: Int(error["code"]?.int64 ?? 2), message: error["message"]?.string ?? "watch failed")
        }
        guard let result = object["result"], case .object = result else { throw .malformedAnswer("a watch message without a result") }
        if result["canceled"]?.bool == true {
            if let oldest = result["compact_revision"]?.int64, oldest > 0 { throw .compacted(oldestRevision: oldest) }
            throw .refused(code: 1, message: result["cancel_reason"]?.string ?? "the watch was cancelled")
        }
        var changes: [DirectoryChange] = []
        for event in result["events"]?.array ?? [] {
            let entry = try EtcdClient.entry(event["kv"])
            if event["type"]?.string == "DELETE" {
                changes.append(.delete(key: entry.key, revision: entry.modRevision))
            } else {
                changes.append(.put(entry))
            }
        }
        return changes
    }
}

extension DirectoryChange {
    /// The revision of the change.
    var revision: Int64 {
        switch self {
        case .put(let entry): entry.modRevision
        case .delete(_, let revision): revision
        }
    }
}
