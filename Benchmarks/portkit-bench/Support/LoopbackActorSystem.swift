import Distributed
import Synchronization

/// The floor of a distributed call in the toolchain's runtime: an actor system whose
/// "transport" is a function call. A call on a remote reference records its arguments
/// (kept as values, not encoded), and `remoteCall` runs the target on the local actor at
/// once, in the calling task, the way `PortActorSystem` serves a call: its types found
/// once (`LoopbackTarget`), then the runtime's `swift_distributed_execute_target`. What it
/// measures is what PortActors pays per call on top of its transport and its encoding: the
/// distributed thunk, the runtime finding the target's accessor, and the hop to the actor.
final class LoopbackActorSystem: DistributedActorSystem, Sendable {
    typealias ActorID = Int
    typealias SerializationRequirement = Codable
    typealias InvocationEncoder = LoopbackInvocation
    typealias InvocationDecoder = LoopbackInvocation
    typealias ResultHandler = LoopbackResult

    /// The one actor it serves (set once, before the first call).
    let served = Mutex<LoopbackActor?>(nil)

    /// Every reference it resolves is remote: its calls go through `remoteCall`.
    func resolve<Act: DistributedActor>(id: Int, as actorType: Act.Type) throws -> Act? where Act.ID == Int { nil }

    func assignID<Act: DistributedActor>(_ actorType: Act.Type) -> Int where Act.ID == Int { 1 }
    func actorReady<Act: DistributedActor>(_ actor: Act) where Act.ID == Int {}
    func resignID(_ id: Int) {}
    func makeInvocationEncoder() -> LoopbackInvocation { LoopbackInvocation() }

    func remoteCall<Act: DistributedActor, Err: Error, Res: Codable>(
        on actor: Act, target: RemoteCallTarget, invocation: inout LoopbackInvocation, throwing: Err.Type, returning: Res.Type
    ) async throws -> Res where Act.ID == Int {
        try await LoopbackTarget.find(target.identifier).execute(on: servedActor(), &invocation, returning: Res.self)
    }

    func remoteCallVoid<Act: DistributedActor, Err: Error>(
        on actor: Act, target: RemoteCallTarget, invocation: inout LoopbackInvocation, throwing: Err.Type
    ) async throws where Act.ID == Int {
        try await LoopbackTarget.find(target.identifier).execute(on: servedActor(), &invocation, returning: Void.self)
    }

    private func servedActor() -> LoopbackActor { served.withLock { $0! } }
}

/// The arguments of a loopback call, as values.
struct LoopbackInvocation: DistributedTargetInvocationEncoder, DistributedTargetInvocationDecoder {
    typealias SerializationRequirement = Codable
    var arguments: [Any] = []
    var next = 0

    mutating func recordGenericSubstitution<T>(_ type: T.Type) throws {}
    mutating func recordArgument<Value: Codable>(_ argument: RemoteCallArgument<Value>) throws { arguments.append(argument.value) }
    mutating func recordErrorType<E: Error>(_ type: E.Type) throws {}
    mutating func recordReturnType<R: Codable>(_ type: R.Type) throws {}
    mutating func doneRecording() throws {}

    mutating func decodeGenericSubstitutions() throws -> [Any.Type] { [] }
    mutating func decodeNextArgument<Argument: Codable>() throws -> Argument {
        defer { next += 1 }
        return arguments[next] as! Argument
    }
    mutating func decodeErrorType() throws -> Any.Type? { nil }
    mutating func decodeReturnType() throws -> Any.Type? { nil }
}

/// The system's result handler, which the protocol requires: no call goes through it, as
/// `LoopbackTarget` hands the result back itself.
struct LoopbackResult: DistributedTargetInvocationResultHandler {
    typealias SerializationRequirement = Codable

    func onReturn<Success: Codable>(value: Success) async throws {}
    func onReturnVoid() async throws {}
    func onThrow<Err: Error>(error: Err) async throws {}
}

/// The bench's actor on the loopback system: the same method as `BenchActor`.
distributed actor LoopbackActor {
    typealias ActorSystem = LoopbackActorSystem

    distributed func move(_ point: BenchPoint) -> BenchPoint {
        BenchPoint(x: point.x + 1, y: point.y + 1, label: point.label)
    }
}
