import Distributed
import PortMessaging

/// Reads a received call's generic substitutions and arguments back for
/// `PortActorSystem`, finding their ports and descriptors among the message's components.
public struct PortInvocationDecoder: DistributedTargetInvocationDecoder {
    /// Arguments and results are `Codable`.
    public typealias SerializationRequirement = any Codable

    let envelope: CallEnvelope
    let decoder: BinaryDecoder
    /// Which argument is next, and where its length is in the envelope.
    private var next = 0
    private var nextOffset: Int

    init(envelope: CallEnvelope, attachments: AttachmentTable?, system: PortActorSystem) {
        self.envelope = envelope
        nextOffset = envelope.firstArgument
        decoder = BinaryDecoder(attachments: attachments, system: system)
    }

    /// The generic substitutions, as types of this process.
    public mutating func decodeGenericSubstitutions() throws -> [Any.Type] {
        try envelope.substitutions.map { name in
            guard let type = _typeByName(name) else { throw PortActorError.invocationFailed("unknown type \(name)") }
            return type
        }
    }

    /// Decodes the next argument.
    public mutating func decodeNextArgument<Argument: Codable>() throws -> Argument {
        guard next < envelope.argumentCount else { throw PortActorError.invocationFailed("fewer arguments than the target takes") }
        defer { next += 1 }
        do {
            let (range, following) = try envelope.argument(at: nextOffset)
            nextOffset = following
            return try decoder.decode(Argument.self, from: envelope.bytes, in: range)
        } catch let error as PortActorError {
            throw error
        } catch {
            throw PortActorError.decoding("argument \(next) as \(Argument.self): \(error)")
        }
    }

    /// Not recorded: the target says it.
    public mutating func decodeErrorType() throws -> Any.Type? { nil }

    /// Not recorded: the target says it.
    public mutating func decodeReturnType() throws -> Any.Type? { nil }
}
