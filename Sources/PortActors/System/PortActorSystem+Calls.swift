import Distributed
import NamedPortServer
import PortMessaging

extension PortActorSystem {
    /// Calls `target` on the remote actor `actor` and returns its result.
    /// - Throws: what the actor threw (when `Codable` and known here), or a
    ///   `PortActorError`: `unknownActor`, `remoteError`, `invocationFailed`, or
    ///   `transport` (`.peerDied`, `.cancelled`, `.receiveTimedOut`, `.cannotCrossHosts`, ...).
    public nonisolated(nonsending) func remoteCall<Act: DistributedActor, Err: Error, Res: Codable>(
        on actor: Act, target: RemoteCallTarget, invocation: inout PortInvocationEncoder, throwing: Err.Type, returning: Res.Type
    ) async throws -> Res where Act.ID == ActorAddress {
        let (reply, address) = try await request(actor.id, target: target, invocation: &invocation)
        let body = try replyBody(reply, from: address)
        guard body.status == .value else { throw PortActorError.decoding("a result was expected from \(address)") }
        let decoder = decoder(for: reply)
        // Descriptors the result did not take are closed: nobody else will.
        defer { decoder.attachments?.closeUnclaimed() }
        do {
            return try decoder.decode(Res.self, from: body.bytes, in: 1..<body.bytes.count)
        } catch let error as PortActorError {
            throw error
        } catch {
            throw PortActorError.decoding("the result from \(address) as \(Res.self): \(error)")
        }
    }

    /// Calls the `Void` target `target` on the remote actor `actor`. A non-throwing target
    /// is sent one-way when `sendsVoidCallsOneWay`: the call returns once sent.
    /// - Throws: as `remoteCall(on:target:invocation:throwing:returning:)`.
    public func remoteCallVoid<Act: DistributedActor, Err: Error>(
        on actor: Act, target: RemoteCallTarget, invocation: inout PortInvocationEncoder, throwing: Err.Type
    ) async throws where Act.ID == ActorAddress {
        if sendsVoidCallsOneWay && Err.self == Never.self {
            return try await send(actor.id, target: target, invocation: &invocation)
        }
        let (reply, address) = try await request(actor.id, target: target, invocation: &invocation)
        _ = try replyBody(reply, from: address)
    }

    // MARK: Sending

    /// The message of a call.
    private func message(
        _ kind: ActorMessageKind, callID: UInt64, route: RemoteRoute, target: RemoteCallTarget, invocation: inout PortInvocationEncoder
    ) throws -> Message {
        let attachments = invocation.attachments
        if route.address.node != nil, !attachments.isEmpty {
            throw PortActorError.transport(.cannotCrossHosts(attachments.contains { if case .port = $0 { true } else { false } } ? "a port" : "a file descriptor"))
        }
        let envelope = CallEnvelope.encoded(
            callID: callID, actorID: route.address.id, target: target.identifier, substitutions: invocation.substitutions,
            argumentCount: invocation.argumentCount, arguments: invocation.takeArguments())
        return AttachmentTable.message(id: kind.rawValue, envelope, then: attachments)
    }

    private nonisolated(nonsending) func request(
        _ id: ActorAddress, target: RemoteCallTarget, invocation: inout PortInvocationEncoder
    ) async throws -> (Message, ActorAddress) {
        if Task.isCancelled { throw PortActorError.transport(.cancelled) }
        let route = try await route(to: id)
        let callID = nextCallID()
        let message = try message(.call, callID: callID, route: route, target: target, invocation: &invocation)
        do {
            return (try await route.port.request(message, sendTimeout: sendTimeout, receiveTimeout: callTimeout), route.address)
        } catch .cancelled {
            // Behind the call on the same connection, so it finds the call started.
            try? route.port.send(Message(id: ActorMessageKind.cancel.rawValue, bytes: CallEnvelope.cancel(callID)), timeout: .seconds(1))
            throw PortActorError.transport(.cancelled)
        } catch {
            throw PortActorError(error)
        }
    }

    private func send(_ id: ActorAddress, target: RemoteCallTarget, invocation: inout PortInvocationEncoder) async throws {
        let route = try await route(to: id)
        let message = try message(.oneWayCall, callID: nextCallID(), route: route, target: target, invocation: &invocation)
        do {
            try route.port.send(message, timeout: sendTimeout)
        } catch {
            throw PortActorError(error)
        }
    }

    // MARK: Replies

    /// The reply's status and its bytes (the status first); throws what the reply says was
    /// thrown.
    private func replyBody(_ reply: Message, from address: ActorAddress) throws -> (status: ReplyStatus, bytes: [UInt8]) {
        guard case .data(let bytes)? = reply.firstComponent, let first = bytes.first, let status = ReplyStatus(rawValue: first) else {
            reply.closeDescriptors()
            throw PortActorError.decoding("a reply without a status from \(address)")
        }
        var reader = BinaryReader(bytes, offset: 1)
        switch status {
        case .value, .void:
            return (status, bytes)
        case .codableError:
            let type = try reader.string()
            if let errorType = _typeByName(type) as? any (Error & Decodable).Type {
                let decoder = BinaryDecoder(attachments: AttachmentTable.incoming(after: reply), system: self)
                throw try Self.decodeError(errorType, bytes, reader.offset..<bytes.count, decoder)
            }
            reply.closeDescriptors()
            throw PortActorError.remoteError(type: type, description: "a Codable error this process does not know")
        case .otherError:
            throw PortActorError.remoteError(type: try reader.string(), description: try reader.string())
        case .failed:
            throw PortActorError.invocationFailed(try reader.string())
        case .unknownActor:
            throw PortActorError.unknownActor(address)
        }
    }

    private static func decodeError<E: Error & Decodable>(
        _ type: E.Type, _ bytes: [UInt8], _ range: Range<Int>, _ decoder: BinaryDecoder
    ) throws -> any Error {
        do {
            return try decoder.decode(E.self, from: bytes, in: range)
        } catch {
            return PortActorError.remoteError(type: "\(E.self)", description: "it did not decode: \(error)")
        }
    }

    private func decoder(for reply: Message) -> BinaryDecoder {
        BinaryDecoder(attachments: AttachmentTable.incoming(after: reply), system: self)
    }
}

extension Message {
    /// Closes the descriptors the message carries (one nobody will decode).
    func closeDescriptors() {
        AttachmentTable(incoming: components).closeUnclaimed()
    }
}
