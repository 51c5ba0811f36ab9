import Distributed
import PortMessaging

/// Records a distributed call's generic substitutions and arguments for
/// `PortActorSystem`: each argument is encoded at once in PortActors' binary layout, its
/// ports and descriptors set aside as components of the call's message.
public struct PortInvocationEncoder: DistributedTargetInvocationEncoder {
    /// Arguments and results are `Codable`.
    public typealias SerializationRequirement = any Codable

    var substitutions: [String] = []
    /// The arguments, each a varint length and its value, one after another.
    var arguments: [UInt8] = []
    var argumentCount = 0
    var encoder: BinaryEncoder

    init(system: PortActorSystem) {
        encoder = BinaryEncoder(system: system)
    }

    /// The arguments written, moved out (the envelope is made in their buffer).
    mutating func takeArguments() -> [UInt8] {
        var taken: [UInt8] = []
        swap(&taken, &arguments)
        return taken
    }

    /// The ports and descriptors the arguments carry, in order.
    var attachments: [MessageComponent] { encoder.outgoing }

    /// Records a generic substitution by its mangled name.
    public mutating func recordGenericSubstitution<T>(_ type: T.Type) throws {
        guard let name = _mangledTypeName(T.self) else { throw PortActorError.encoding("\(T.self) has no mangled name") }
        substitutions.append(name)
    }

    /// Encodes an argument.
    public mutating func recordArgument<Value: Codable>(_ argument: RemoteCallArgument<Value>) throws {
        // Room for a few small arguments at once, rather than growing by doubling, and for
        // the envelope's other fields, written in the same buffer (`CallEnvelope.encoded`).
        if arguments.capacity == 0 { arguments.reserveCapacity(192) }
        do {
            try encoder.encodeLengthPrefixed(argument.value, into: &arguments)
            argumentCount += 1
        } catch let error as PortActorError {
            throw error
        } catch {
            throw PortActorError.encoding("argument '\(argument.effectiveLabel)': \(error)")
        }
    }

    /// Nothing to record: the target's identifier says it.
    public mutating func recordErrorType<E: Error>(_ type: E.Type) throws {}

    /// Nothing to record: the target's identifier says it.
    public mutating func recordReturnType<R: Codable>(_ type: R.Type) throws {}

    /// Ends the recording.
    public mutating func doneRecording() throws {}
}
