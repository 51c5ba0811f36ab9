import Distributed
import PortMessaging

/// Sends a distributed call's outcome back to its caller, as the reply to its request: the
/// value it returned, or the error it threw (itself if `Codable`, else its type's name and
/// description). A one-way call's outcome goes nowhere.
public struct PortResultHandler: DistributedTargetInvocationResultHandler {
    /// Arguments and results are `Codable`.
    public typealias SerializationRequirement = any Codable

    let reply: PendingReply?
    let system: PortActorSystem

    /// Sends the value back.
    public func onReturn<Success: Codable>(value: Success) async throws {
        answer(value)
    }

    /// Sends the value back: what `onReturn(value:)` does, called directly by a resolved
    /// target. `onReturn(value:)`, the protocol's ad hoc requirement, finds the value's
    /// `Encodable` and `Decodable` conformances at run time on every call (two lookups in
    /// the runtime's conformance cache); this takes them from its caller.
    func answer<Success: Codable>(_ value: Success) {
        guard let reply else { return }
        var encoder = BinaryEncoder(system: system)
        var body: [UInt8] = []
        body.reserveCapacity(64)
        body.append(ReplyStatus.value.rawValue)
        do {
            try encoder.encode(value, into: &body)
        } catch {
            return fail("the result does not encode: \(error)")
        }
        send(AttachmentTable.message(id: reply.requestID, body, then: encoder.outgoing), on: reply)
    }

    /// Tells the caller the call returned.
    public func onReturnVoid() async throws {
        guard let reply else { return }
        send(Message(id: reply.requestID, bytes: [ReplyStatus.void.rawValue]), on: reply)
    }

    /// Sends the thrown error back.
    public func onThrow<Err: Error>(error: Err) async throws {
        guard let reply else { return }
        if let failure = error as? PortActorError {
            // The system's own failure to run the call (an argument that does not decode).
            return fail(failure.description)
        }
        if let codable = error as? any (Error & Encodable), let type = _mangledTypeName(Swift.type(of: codable)) {
            var body: [UInt8] = [ReplyStatus.codableError.rawValue]
            body.appendString(type)
            var encoder = BinaryEncoder(system: system)
            if (try? encoder.encode(codable, into: &body)) != nil {
                return send(
                    AttachmentTable.message(id: reply.requestID, body, then: encoder.outgoing), on: reply)
            }
        }
        var body: [UInt8] = [ReplyStatus.otherError.rawValue]
        body.appendString(String(reflecting: Swift.type(of: error as Any)))
        body.appendString(String(describing: error))
        send(Message(id: reply.requestID, bytes: body), on: reply)
    }

    /// Tells the caller the system could not run the call.
    func fail(_ reason: String) {
        guard let reply else { return }
        var body: [UInt8] = [ReplyStatus.failed.rawValue]
        body.appendString(reason)
        send(Message(id: reply.requestID, bytes: body), on: reply)
    }

    private func send(_ message: Message, on reply: PendingReply) {
        do {
            try reply.answer(message)
        } catch {
            // What cannot travel (too large, a port that cannot cross) still ends the wait.
            var body: [UInt8] = [ReplyStatus.failed.rawValue]
            body.appendString("the reply could not be sent: \(error)")
            reply.reply(Message(id: reply.requestID, bytes: body))
        }
    }
}
