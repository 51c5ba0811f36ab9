import NamedPortServer
import PermanentThread
import PortMessaging

/// What can go wrong with a distributed call, an actor's name or an actor system, besides
/// what the called actor throws itself. The layers below are carried whole: names' refusals
/// (taken, missing, refused) are `names`, the port layer's faults (the actor's process
/// died, no reply in time, the task cancelled, ...) `transport`, the system's thread's
/// `thread`.
public enum PortActorError: Error, Hashable, Sendable, CustomStringConvertible {
    /// No actor at this address: it was never there, or has been released.
    case unknownActor(ActorAddress)
    /// The port found under this name is not a `PortActorSystem`'s, or gave no actor.
    case notAnActor(name: String)
    /// The called actor threw an error that is not `Codable` (or not known to this
    /// process): its type's name and its description.
    case remoteError(type: String, description: String)
    /// The remote system could not run the call: an unknown target or an argument it
    /// could not decode, or it dropped the call without an answer.
    case invocationFailed(String)
    /// A value could not be encoded.
    case encoding(String)
    /// A value could not be decoded.
    case decoding(String)
    /// The actor system was shut down.
    case systemShutDown
    /// The system has no name server client, and the operation needs one.
    case noNameServer
    /// The port layer failed the call: `.peerDied` (the actor's process died or closed its
    /// end, before or during the call: a call in flight may or may not have run),
    /// `.cancelled` (the calling task was cancelled: the call returned at once, the remote
    /// call's task was told to cancel, and the call may have run, in part or in whole),
    /// `.receiveTimedOut` (no reply within the system's call timeout; the call was
    /// delivered), `.cannotCrossHosts` (a port or a file descriptor was to travel to an
    /// actor on another host; nothing was sent), a message too large, ...
    case transport(PortError)
    /// The name server or its client refused (`nameTaken`, `notFound`, `invalidName`,
    /// `permissionDenied`, ...; `nameTaken` too for a name this system holds for another
    /// actor).
    case names(NameServerError)
    /// The system's permanent thread could not start, or was stopped.
    case thread(PermanentThreadError)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .unknownActor(let address): "no actor at \(address)"
        case .notAnActor(let name): "the port named '\(name)' is not an actor's"
        case .remoteError(let type, let description): "the actor threw \(type): \(description)"
        case .invocationFailed(let why): "the remote system could not run the call: \(why)"
        case .encoding(let why): "could not encode: \(why)"
        case .decoding(let why): "could not decode: \(why)"
        case .systemShutDown: "the actor system was shut down"
        case .noNameServer: "the actor system has no name server client"
        case .transport(let error): "\(error)"
        case .names(let error): "\(error)"
        case .thread(let error): "\(error)"
        }
    }

    /// The error a failed request stands for: a route whose port was invalidated is one
    /// whose peer is gone.
    init(_ error: PortError) {
        switch error {
        case .invalidPort: self = .transport(.peerDied)
        case .noReply: self = .invocationFailed("the call was dropped without an answer")
        default: self = .transport(error)
        }
    }
}
