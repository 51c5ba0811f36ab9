import Distributed
import PortMessaging

extension PortActorSystem {
    /// The port's handler, on the system's loop: one message at a time, in arrival order.
    func receive(_ message: Message, reply: PendingReply?) {
        guard let kind = ActorMessageKind(rawValue: message.id), case .data(let bytes)? = message.firstComponent else {
            message.closeDescriptors()
            reply?.refuse()
            return
        }
        switch kind {
        case .call, .oneWayCall:
            serve(message, bytes, reply: kind == .call ? reply : nil)
        case .cancel:
            guard let callID = CallEnvelope.callID(of: bytes) else { return }
            let call = state.withLock { $0.calls[CallKey(peer: message.peer?.id ?? 0, call: callID)] }
            call?.cancel()
        case .describe:
            describe(String(decoding: bytes, as: UTF8.self), reply: reply)
        }
    }

    /// Starts a call: decodes its envelope and starts a task that decodes its arguments and
    /// runs it. Each call's task is queued on the same serial executor (the actor's thread,
    /// else the system's) in arrival order, and takes the same steps to the actor, so calls
    /// reach the actor in the order they arrive.
    private func serve(_ message: Message, _ bytes: [UInt8], reply: PendingReply?) {
        let handler = PortResultHandler(reply: reply, system: self)
        let envelope: CallEnvelope
        do {
            envelope = try CallEnvelope(decoding: bytes)
        } catch {
            message.closeDescriptors()
            return handler.fail("\(error)")
        }
        let key = CallKey(peer: message.peer?.id ?? 0, call: envelope.callID)
        let call = RunningCall()
        // One look under the lock: the actor, the executor its calls prefer, the call kept.
        let found = state.withLock { state -> (actor: any DistributedActor, executor: PermanentThread?)? in
            guard let actor = state.locals[envelope.actorID]?.actor else { return nil }
            state.calls[key] = call
            return (actor, state.threads[envelope.actorID])
        }
        guard let (actor, executor) = found else {
            message.closeDescriptors()
            reply?.reply(Message(id: message.id, bytes: [ReplyStatus.unknownActor.rawValue]))
            return
        }
        let attachments = AttachmentTable.incoming(after: message)
        let decoder = PortInvocationDecoder(envelope: envelope, attachments: attachments, system: self)
        // The call's task prefers the actor's thread (else the system's): when that is this
        // loop's thread it starts right here, up to its hop onto the actor; else its first
        // job is queued there now. Either way calls start in arrival order, and the task's
        // nonisolated parts (decoding the arguments, sending the reply) run on that thread,
        // never on the shared pool: a call to an actor on this loop's thread wakes no other.
        let task = Task.immediate(executorPreference: executor ?? thread) {
            await self.run(on: actor, decoder, handler)
            attachments?.closeUnclaimed()
            self.state.withLock { _ = $0.calls.removeValue(forKey: key) }
        }
        call.started(task)
    }

    private func run(on actor: some DistributedActor, _ decoder: PortInvocationDecoder, _ handler: PortResultHandler) async {
        var decoder = decoder
        let envelope = decoder.envelope
        do {
            let resolved = envelope.bytes.withUnsafeBufferPointer { ResolvedTarget.find(UnsafeBufferPointer(rebasing: $0[envelope.targetRange])) }
            if let resolved {
                try await resolved.execute(on: actor, &decoder, handler, system: self)
            } else {
                try await executeDistributedTarget(
                    on: actor, target: RemoteCallTarget(envelope.target), invocationDecoder: &decoder, handler: handler)
            }
        } catch {
            handler.fail("\(error)")
        }
    }

    /// Answers which actor holds `name` here: status 0, its id (8 bytes) and this
    /// process's pid (4 bytes), little-endian; or `unknownActor`.
    private func describe(_ name: String, reply: PendingReply?) {
        guard let reply else { return }
        guard let id = state.withLock({ $0.named[name] }) else {
            reply.reply(Message(id: reply.requestID, bytes: [ReplyStatus.unknownActor.rawValue]))
            return
        }
        var body: [UInt8] = [ReplyStatus.value.rawValue]
        body.appendFixed(id)
        body.appendFixed(UInt32(bitPattern: pid))
        reply.reply(Message(id: reply.requestID, bytes: body))
    }
}
