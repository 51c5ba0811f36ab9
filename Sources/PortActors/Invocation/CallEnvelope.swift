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
/// arguments (a varint count, each a varint length and that many bytes of PortActors'
/// binary layout, `BinaryTag`). Ports and descriptors of the arguments are the message's
/// next components, named by their index among them.
///
/// Received, the arguments stay where they are in the envelope's bytes: each is decoded
/// from its range there, found in turn (`argument(at:)`), as the target takes them.
struct CallEnvelope {
    static let version: UInt8 = 1

    var callID: UInt64
    var actorID: UInt64
    /// Where the target's identifier (its mangled name, UTF-8) is in `bytes`: a served call
    /// finds its resolved target by these bytes, without making a string of them.
    var targetRange: Range<Int>
    var substitutions: [String]
    /// The envelope's bytes, which hold the arguments.
    let bytes: [UInt8]
    /// How many arguments there are.
    var argumentCount: Int
    /// Where the first argument's length is in `bytes` (checked, with every other's, when
    /// the envelope was read).
    var firstArgument: Int

    /// The envelope of a call whose arguments `PortInvocationEncoder` wrote (`count` of
    /// them, each length-prefixed, in `arguments`).
    ///
    /// Made in `arguments`' own buffer, not copied into a new one: the fields before the
    /// arguments are appended after them (in the room the encoder reserved), then moved in
    /// front of them through a small temporary on the stack.
    static func encoded(
        callID: UInt64, actorID: UInt64, target: String, substitutions: [String], argumentCount: Int, arguments: consuming [UInt8]
    ) -> [UInt8] {
        var out = arguments
        let argumentsEnd = out.count
        out.append(version)
        out.appendFixed(callID)
        out.appendVarint(actorID)
        out.appendString(target)
        out.appendVarint(UInt64(substitutions.count))
        for substitution in substitutions { out.appendString(substitution) }
        out.appendVarint(UInt64(argumentCount))
        let headerCount = out.count - argumentsEnd
        out.withUnsafeMutableBytes { bytes in
            withUnsafeTemporaryAllocation(byteCount: headerCount, alignment: 1) { header in
                header.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[argumentsEnd...]))
                // A memmove: the arguments' old and new places overlap.
                (bytes.baseAddress! + headerCount).copyMemory(from: bytes.baseAddress!, byteCount: argumentsEnd)
                bytes.copyMemory(from: UnsafeRawBufferPointer(header))
            }
        }
        return out
    }

    init(decoding bytes: [UInt8]) throws(PortActorError) {
        self.bytes = bytes
        var reader = BinaryReader(bytes)
        guard try reader.byte() == Self.version else { throw .decoding("a call envelope of another version") }
        callID = try reader.fixed(UInt64.self)
        actorID = try reader.varint()
        let targetLength = try reader.count()
        let targetStart = try reader.advance(targetLength)
        targetRange = targetStart..<targetStart + targetLength
        substitutions = []
        for _ in 0..<(try reader.count()) { substitutions.append(try reader.string()) }
        argumentCount = try reader.count()
        firstArgument = reader.offset
        for _ in 0..<argumentCount { _ = try reader.advance(try reader.count()) }
        guard reader.isAtEnd else { throw .decoding("bytes after the call envelope") }
    }

    /// The range in `bytes` of the argument whose length is at `offset` (the first's at
    /// `firstArgument`), and where the next one's length is.
    func argument(at offset: Int) throws(PortActorError) -> (value: Range<Int>, next: Int) {
        var reader = BinaryReader(bytes, offset: offset)
        let length = try reader.count()
        let start = try reader.advance(length)
        return (start..<start + length, reader.offset)
    }

    /// The target's identifier.
    var target: String {
        bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[targetRange]), as: UTF8.self) }
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
        out.appendFixed(callID)
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
