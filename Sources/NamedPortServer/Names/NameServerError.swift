import PermanentThread
import PortKitSystem
import PortMessaging

/// Why a name operation failed: every refusal of the registry, the name server or its
/// client is one of these, so a caller can match the case it cares about.
public enum NameServerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The name is registered already; `ownerPID` is the process that holds it.
    case nameTaken(name: String, ownerPID: Int32)
    /// Another node of the cluster holds the name: process `ownerPID` on node `node`.
    case nameTakenElsewhere(name: String, node: String, ownerPID: Int32)
    /// No port is registered under the name.
    case notFound(name: String)
    /// A wait of the name layer's own ran out: a lookup waiting for a name to be
    /// registered (at the server or in the process registry), or a call to the name
    /// server's thread; `operation` says which. (A server that does not answer in time is
    /// `.transport(.sendTimedOut)` or `.transport(.receiveTimedOut)`.)
    case waitTimedOut(operation: String)
    /// The server refused the caller: another user (SO_PEERCRED) than its policy allows,
    /// or the socket or its directory is not accessible to the caller.
    case permissionDenied(reason: String)
    /// The name is not acceptable; `reason` says why.
    case invalidName(name: String, reason: InvalidNameReason)
    /// No name server answers at `address`; `reason` is what the attempt ran into.
    /// The description says how to start one.
    case serverUnavailable(address: String, reason: String)
    /// The name is held by another connection, which alone may release it.
    case notOwner(name: String, ownerPID: Int32)
    /// A per-connection limit (names, watches, waiting lookups, connections) is reached.
    case limitExceeded(what: String, limit: Int)
    /// A live name server already listens at `address`; it is never displaced.
    case serverAlreadyRunning(address: String)
    /// The connection to the server ended (the server stopped, or the client was closed).
    case connectionLost(address: String)
    /// The peer broke the name protocol (a malformed or unexpected frame).
    case protocolError(String)
    /// The client refused what listens at `address`: the server's process (SO_PEERCRED)
    /// or the default address's directory belongs to `ownerUID`, which is neither this
    /// user, nor root, nor a user the caller trusts, or the directory is writable by
    /// others. Nothing was sent to it.
    case untrustedServer(address: String, ownerUID: UInt32, reason: String)
    /// The server at `address` is out of resources (descriptors, or its connection
    /// limit) and turned the request or the connection away; trying again later may work.
    case serverBusy(address: String, reason: String)
    /// A system call of the name server's own failed (making its socket's directory,
    /// binding its socket, ...).
    case system(SystemCallError)
    /// The port layer failed a call to the server in a way that means nothing more for
    /// names: `.cancelled` (the awaiting task was cancelled: the wait ended at once, and a
    /// late answer is dropped, a lookup's port closed), `.sendTimedOut` or
    /// `.receiveTimedOut` (the server did not answer in time), a failed system call, ...
    /// A lost connection, an absent server and a busy one have cases of their own.
    case transport(PortError)
    /// The owner of `name` declared a peer requirement (`PeerRequirement`, given to
    /// `register`) that this process does not meet; `reason` says which rule failed. No
    /// connection to the owner was made.
    case peerRequirementNotMet(name: String, reason: String)
    /// A registration's requirement holds a predicate, which cannot travel to the name
    /// server (only a listening port checks one); `requirement` describes it. Nothing was sent.
    case requirementCannotTravel(requirement: String)
    /// `name` is activatable (a service file names it) and was absent, and the service
    /// started for it did not register it: `reason` says how the start failed.
    case activationFailed(name: String, reason: NameActivationFailure)

    /// The failure of the name server's system call `operation` with `errno`.
    public static func system(operation: String, errno: Int32) -> NameServerError {
        .system(SystemCallError(operation: operation, errno: errno))
    }

    /// Why a name is refused.
    public enum InvalidNameReason: Hashable, Sendable, CustomStringConvertible {
        /// The name is the empty string.
        case empty
        /// The name's UTF-8 form is longer than `NameRules.maxNameBytes`.
        case tooLong(bytes: Int)
        /// The name holds a control character (U+0000–U+001F, U+007F–U+009F).
        case controlCharacter
        /// The name holds whitespace (a space, a no-break space, any Unicode white space),
        /// which would make it two words on a line.
        case whitespace
        /// The name holds a `/`.
        case slash
        /// The bytes that arrived for the name are not UTF-8 (only from the wire).
        case notUTF8

        /// A few words saying what is wrong.
        public var description: String {
            switch self {
            case .empty: return "empty"
            case .tooLong(let bytes): return "\(bytes) bytes, the limit is \(NameRules.maxNameBytes)"
            case .controlCharacter: return "contains a control character"
            case .whitespace: return "contains whitespace"
            case .slash: return "contains '/'"
            case .notUTF8: return "not UTF-8"
            }
        }
    }

    /// One line, naming the values involved.
    public var description: String {
        switch self {
        case .nameTaken(let name, let pid):
            return "name '\(name)' is taken by process \(pid)"
        case .nameTakenElsewhere(let name, let node, let pid):
            return "name '\(name)' is taken by process \(pid) on node \(node)"
        case .notFound(let name):
            return "no port is registered as '\(name)'"
        case .waitTimedOut(let operation):
            return "timed out: \(operation)"
        case .permissionDenied(let reason):
            return "permission denied: \(reason)"
        case .invalidName(let name, let reason):
            return "invalid name '\(NameRules.printable(name))': \(reason)"
        case .serverUnavailable(let address, let reason):
            return "no name server at \(address) (\(reason)); start one with 'portnamed --address \(address)'"
        case .notOwner(let name, let pid):
            return "name '\(name)' belongs to process \(pid); only its owner can release it"
        case .limitExceeded(let what, let limit):
            return "limit reached: at most \(limit) \(what)"
        case .serverAlreadyRunning(let address):
            return "a name server is already running at \(address)"
        case .connectionLost(let address):
            return "the connection to the name server at \(address) ended"
        case .protocolError(let detail):
            return "name protocol error: \(detail)"
        case .system(let failure):
            return "\(failure)"
        case .untrustedServer(let address, let owner, let reason):
            return "not trusting the name server at \(address): \(reason) (owner uid \(owner))"
        case .serverBusy(let address, let reason):
            return "the name server at \(address) is busy: \(reason); try again later"
        case .transport(let error):
            return "\(error)"
        case .peerRequirementNotMet(let name, let reason):
            return "the owner of '\(name)' refuses this process: \(reason)"
        case .requirementCannotTravel(let requirement):
            return "the requirement '\(requirement)' holds a predicate, which the name server cannot check"
        case .activationFailed(let name, let reason):
            return "the service for '\(name)' did not start: \(reason)"
        }
    }
}
