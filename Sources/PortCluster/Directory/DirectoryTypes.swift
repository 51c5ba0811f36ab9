/// Why an operation on the cluster's directory (etcd) failed.
public enum DirectoryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The directory cannot be reached: refused, broken, or no answer in time. Cluster
    /// operations fail with this until it is back; names of this host keep working.
    case unavailable(endpoint: String, reason: String)
    /// The directory refused the operation: etcd's error code (a gRPC status code) and message.
    case refused(code: Int, message: String)
    /// The lease is gone (it expired or was revoked): every key on it has been deleted.
    case leaseNotFound(Int64)
    /// A watch asked for changes from a revision the directory has compacted away; the
    /// oldest revision it still has.
    case compacted(oldestRevision: Int64)
    /// The directory's answer could not be read.
    case malformedAnswer(String)
    /// An endpoint that is not `http://HOST:PORT`.
    case invalidEndpoint(String)

    /// What went wrong, in a sentence.
    public var description: String {
        switch self {
        case .unavailable(let endpoint, let reason): "the directory at \(endpoint) is unavailable: \(reason)"
        case .refused(let code, let message): "the directory refused: \(message) (code \(code))"
        case .leaseNotFound(let lease): "lease \(lease) is gone (expired or revoked)"
        case .compacted(let oldest): "the directory no longer has that revision; the oldest is \(oldest)"
        case .malformedAnswer(let reason): "the directory's answer is malformed: \(reason)"
        case .invalidEndpoint(let endpoint): "not a directory endpoint (http://HOST:PORT, or https://HOST:PORT with a TLS security): \(endpoint)"
        }
    }
}

/// A key in the directory and what it holds.
public struct DirectoryEntry: Sendable, Equatable, CustomStringConvertible {
    /// The key.
    public var key: String
    /// Its value.
    public var value: [UInt8]
    /// The revision that created the key (unchanged by later puts): which of two claims
    /// on a name came first.
    public var createRevision: Int64
    /// The revision of the key's last change.
    public var modRevision: Int64
    /// The lease the key is attached to (0: none): the key goes when the lease does.
    public var lease: Int64

    /// An entry.
    public init(key: String, value: [UInt8], createRevision: Int64, modRevision: Int64, lease: Int64) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.lease = lease
    }

    /// "KEY (rev N, lease L)".
    public var description: String { "\(key) (rev \(modRevision), lease \(lease))" }
}

/// One change seen by a directory watch.
public enum DirectoryChange: Sendable, Equatable {
    /// The key was created or changed.
    case put(DirectoryEntry)
    /// The key was deleted (or its lease went), at `revision`.
    case delete(key: String, revision: Int64)

    /// The key changed.
    public var key: String {
        switch self {
        case .put(let entry): entry.key
        case .delete(let key, _): key
        }
    }
}

/// A lease: keys attached to it live while it is renewed within its time to live.
public struct DirectoryLease: Sendable, Equatable {
    /// Its id.
    public var id: Int64
    /// Its time to live, in seconds, as granted.
    public var ttl: Int

    /// A lease.
    public init(id: Int64, ttl: Int) {
        self.id = id
        self.ttl = ttl
    }
}

/// What a create-if-absent found.
public enum DirectoryClaim: Sendable, Equatable {
    /// The key was free and is now ours, created at this revision.
    case created(revision: Int64)
    /// Someone holds the key already: what it holds.
    case taken(DirectoryEntry)
}
