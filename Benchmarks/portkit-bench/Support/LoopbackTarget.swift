import Distributed
import PortActors
import Synchronization

/// A target of the loopback system, its parameter types found on its first call: what
/// PortActors' `ResolvedTarget` does for a served call, so that the floor does not pay the
/// per-call demangling of `executeDistributedTarget` that PortActors no longer pays. Only
/// the non-generic targets of `LoopbackActor` are called through it, by the runtime entry
/// points PortActors declares (`distributedParameterTypes`, `distributedExecuteTarget`).
// Safety of @unchecked Sendable: every stored property is set in `init` and never changes;
// the buffers are only read (by the runtime, during calls).
final class LoopbackTarget: @unchecked Sendable {
    private let name: UnsafeMutableBufferPointer<UInt8>
    private let parameterTypes: UnsafeMutableBufferPointer<Any.Type>

    private static let resolved = Mutex<[String: LoopbackTarget]>([:])

    /// The target `identifier`, resolved on its first call.
    static func find(_ identifier: String) throws -> LoopbackTarget {
        if let known = resolved.withLock({ $0[identifier] }) { return known }
        let target = try LoopbackTarget(identifier)
        resolved.withLock { $0[identifier] = target }
        return target
    }

    private init(_ identifier: String) throws {
        let utf8 = Array(identifier.utf8)
        let count = Int(utf8.withUnsafeBufferPointer { __getParameterCount($0.baseAddress!, UInt($0.count)) })
        guard count >= 0 else { throw BenchmarkError.notMeasurable("the target \(identifier) does not resolve") }
        name = .allocate(capacity: utf8.count)
        _ = name.initialize(from: utf8)
        parameterTypes = .allocate(capacity: count)
        let written = distributedParameterTypes(
            name.baseAddress!, UInt(name.count), nil, nil, UnsafeMutableRawPointer(parameterTypes.baseAddress), count)
        guard written == count else { throw BenchmarkError.notMeasurable("the target \(identifier) has no parameter types") }
    }

    /// Runs the target on `actor` with the arguments `invocation` recorded; its result.
    func execute<Res>(on actor: some DistributedActor, _ invocation: inout LoopbackInvocation, returning: Res.Type) async throws -> Res {
        let result = UnsafeMutablePointer<Res>.allocate(capacity: 1)
        defer { result.deallocate() }
        try await distributedExecuteTarget(
            on: actor, UnsafePointer(name.baseAddress!), UInt(name.count), argumentDecoder: &invocation,
            argumentTypes: UnsafeRawPointer(parameterTypes.baseAddress), resultBuffer: UnsafeMutableRawPointer(result),
            substitutions: nil, witnessTables: nil, numWitnessTables: 0)
        return result.move()
    }
}

