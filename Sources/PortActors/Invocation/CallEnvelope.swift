import PortMessaging

/// The messages a `PortActorSystem` sends, by message id.
enum ActorMessageKind: UInt32 {
    /// A call that wants its result: a request.
    case call = 1
    /// A call whose caller does not wait (a `Void`, non-throwing target): a one-way message.
    case oneWayCall = 2
    /// Cancel the call with this id (one-way): its task is cancelled.
    case cancel = 3
    /// Which actor holds this name here (a request): its id and the process's pid.
    case describe = 4
}

/// A call's first component: which actor, which target, with what.
///
/// Layout: a version byte (1); the call's id (8 bytes, little-endian, the caller's, to
/// cancel it by); the actor's id (varint); the target's identifier (varint length, UTF-8);
/// the generic substitutions (a varint count, each a mangled type name as a string); the
/// arguments (a varint count, each a varint length and that many bytes of `BinaryValue`).
/// Ports and descriptors of the arguments are the message's next components, named by
/// their index among them.
struct CallEnvelope {
    static let version: UInt8 = 1

    var callID: UInt64
    var actorID: UInt64
    var target: String
    var substitutions: [String]
    var arguments: [[UInt8]]

    func encoded() -> [UInt8] {
        var out: [UInt8] = [Self.version]
        out.reserveCapacity(32 + target.utf8.count + arguments.reduce(0) { $0 + $1.count + 2 })
        BinaryValue.writeFixed(callID, to: &out)
        BinaryValue.writeVarint(actorID, to: &out)
        BinaryValue.writeString(target, to: &out)
        BinaryValue.writeVarint(UInt64(substitutions.count), to: &out)
        for substitution in substitutions { BinaryValue.writeString(substitution, to: &out) }
        BinaryValue.writeVarint(UInt64(arguments.count), to: &out)
        for argument in arguments {
            BinaryValue.writeVarint(UInt64(argument.count), to: &out)
            out.append(contentsOf: argument)
        }
        return out
    }

    init(callID: UInt64, actorID: UInt64, target: String, substitutions: [String], arguments: [[UInt8]]) {
        self.callID = callID
        self.actorID = actorID
        self.target = target
        self.substitutions = substitutions
        self.arguments = arguments
    }

    init(decoding bytes: [UInt8]) throws(PortActorError) {
        var reader = BinaryReader(bytes)
        guard try reader.byte() == Self.version else { throw .decoding("a call envelope of another version") }
        callID = try reader.fixed(UInt64.self)
        actorID = try reader.varint()
        target = try reader.string()
        substitutions = []
        for _ in 0..<(try reader.count()) { substitutions.append(try reader.string()) }
        arguments = []
        for _ in 0..<(try reader.count()) { arguments.append(Array(try reader.raw(try reader.count()))) }
        guard reader.isAtEnd else { throw .decoding("bytes after the call envelope") }
    }

    /// The call id of a call or cancel message's first component, read alone.
    static func callID(of bytes: [UInt8]) -> UInt64? {
        var reader = BinaryReader(bytes)
        guard (try? reader.byte()) == version else { return nil }
        return try? reader.fixed(UInt64.self)
    }

    /// A cancel message's first component.
    static func cancel(_ callID: UInt64) -> [UInt8] {
        var out: [UInt8] = [version]
        BinaryValue.writeFixed(callID, to: &out)
        return out
    }
}

/// A reply's first component: a status byte, then what it says.
///
/// | status | means | then |
/// | ---: | --- | --- |
/// | 0 | returned a value | the value |
/// | 1 | returned (`Void`) | — |
/// | 2 | threw a `Codable` error | its mangled type name (string), the error |
/// | 3 | threw another error | its type's name, its description (strings) |
/// | 4 | the system could not run the call | the reason (string) |
/// | 5 | no such actor | — |
enum ReplyStatus: UInt8 {
    case value = 0, void, codableError, otherError, failed, unknownActor
}
