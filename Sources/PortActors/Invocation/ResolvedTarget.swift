import Distributed
import Glibc
import PortKitLocks

/// A distributed target's parameter and return types, found once per process.
///
/// `executeDistributedTarget` finds them by demangling the target's name on every call (its
/// parameter count, each parameter's type, its return type): about a third of a served
/// call's instructions. A non-generic target's types never change, so the system looks them
/// up on the target's first call, keeps them, and hands each call to the runtime entry point
/// `executeDistributedTarget` ends in, with the same arguments it would pass. A generic
/// target (whose types depend on the call's substitutions) and a name that does not resolve
/// take `executeDistributedTarget` itself, which throws its own errors for the latter.
// Safety of @unchecked Sendable: every stored property is set in `init` and never changes;
// the buffers are read only (by the runtime, during calls) until `deinit` frees them.
final class ResolvedTarget: @unchecked Sendable {
    /// The target's mangled name, as the runtime reads it.
    private let name: UnsafeMutableBufferPointer<UInt8>
    /// The parameters' types, in order.
    private let parameterTypes: UnsafeMutableBufferPointer<Any.Type>
    private let returnType: Any.Type
    /// The return type as `Codable`, found once: `invokeHandlerOnReturn` casts it on every
    /// call. `nil` for `Void`.
    private let codableReturnType: (any Codable.Type)?

    /// The targets resolved so far, by a hash of their mangled name (`key(of:)`), each
    /// checked against the name byte for byte. Only names the runtime resolved are kept,
    /// and only so many: a peer sending ever new names cannot grow it without end.
    private static let resolved = Locked<[UInt64: ResolvedTarget]>([:])
    private static let limit = 1024

    /// The non-generic target whose identifier is `name` (UTF-8), its types found on its
    /// first call; `nil` for a generic target or a name the runtime does not resolve.
    ///
    /// A call's target is found by its bytes as they arrived, not by a string made of them:
    /// no string, no `String` hashing, per call.
    static func find(_ name: UnsafeBufferPointer<UInt8>) -> ResolvedTarget? {
        let key = key(of: name)
        if let known = resolved.withLock({ $0[key] }), known.isNamed(name) { return known }
        guard let target = ResolvedTarget(String(decoding: name, as: UTF8.self)) else { return nil }
        // Two names of one key (unlikely) both work: the second is resolved on each call.
        resolved.withLock { table in
            if table[key] == nil, table.count < limit { table[key] = target }
        }
        return target
    }

    /// A 64-bit FNV-1a hash of `name`, eight bytes at a time: names are a few dozen bytes.
    private static func key(of name: UnsafeBufferPointer<UInt8>) -> UInt64 {
        let prime: UInt64 = 0x100_0000_01b3
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ UInt64(name.count)
        guard let base = name.baseAddress else { return hash }
        let raw = UnsafeRawPointer(base)
        var offset = 0
        while offset + 8 <= name.count {
            hash = (hash ^ raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* prime
            offset += 8
        }
        while offset < name.count {
            hash = (hash ^ UInt64(name[offset])) &* prime
            offset += 1
        }
        return hash
    }

    /// Whether `bytes` is the target's mangled name.
    private func isNamed(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        bytes.count == name.count && (bytes.count == 0 || memcmp(bytes.baseAddress!, name.baseAddress!, bytes.count) == 0)
    }

    private init?(_ identifier: String) {
        let utf8 = Array(identifier.utf8)
        let found: (types: [Any.Type], returnType: Any.Type)? = utf8.withUnsafeBufferPointer { name in
            guard let start = name.baseAddress else { return nil }
            let length = UInt(name.count)
            guard _getGenericEnvironmentOfDistributedTarget(start, length) == nil else { return nil }
            let count = Int(__getParameterCount(start, length))
            guard count >= 0, let returnType = __getReturnTypeInfo(start, length, nil, nil) else { return nil }
            let types = [Any.Type](unsafeUninitializedCapacity: count) { buffer, initialized in
                let written = distributedParameterTypes(start, length, nil, nil, UnsafeMutableRawPointer(buffer.baseAddress), count)
                initialized = written == count ? count : 0
            }
            guard types.count == count else { return nil }
            return (types, returnType)
        }
        guard let found else { return nil }
        name = .allocate(capacity: utf8.count)
        _ = name.initialize(from: utf8)
        parameterTypes = .allocate(capacity: found.types.count)
        _ = parameterTypes.initialize(from: found.types)
        returnType = found.returnType
        codableReturnType = found.returnType as? any Codable.Type
    }

    deinit {
        name.deallocate()
        parameterTypes.deallocate()
    }

    /// Runs the target on `actor`, its arguments from `decoder`, and gives `handler` its
    /// result or what it threw, as `executeDistributedTarget` does.
    func execute(
        on actor: some DistributedActor, _ decoder: inout PortInvocationDecoder, _ handler: PortResultHandler,
        system: PortActorSystem
    ) async throws {
        func allocate<R>(_: R.Type) -> UnsafeMutableRawPointer {
            UnsafeMutableRawPointer(UnsafeMutablePointer<R>.allocate(capacity: 1))
        }
        let result = _openExistential(returnType, do: allocate)
        var filled = false
        func release<R>(_: R.Type) {
            let value = result.assumingMemoryBound(to: R.self)
            if filled { value.deinitialize(count: 1) }
            value.deallocate()
        }
        defer { _openExistential(returnType, do: release) }
        do {
            let recordedReturnType = try decoder.decodeReturnType()
            let returnType = recordedReturnType ?? self.returnType
            try await distributedExecuteTarget(
                on: actor, UnsafePointer(name.baseAddress!), UInt(name.count), argumentDecoder: &decoder,
                argumentTypes: UnsafeRawPointer(parameterTypes.baseAddress), resultBuffer: result,
                substitutions: nil, witnessTables: nil, numWitnessTables: 0)
            filled = true
            if returnType == Void.self {
                try await handler.onReturnVoid()
            } else if recordedReturnType == nil, let codableReturnType {
                Self.returnValue(of: codableReturnType, in: result, to: handler)
            } else {
                try await system.invokeHandlerOnReturn(handler: handler, resultBuffer: UnsafeRawPointer(result), metatype: returnType)
            }
        } catch {
            try await handler.onThrow(error: error)
        }
    }

    /// Gives `handler` the `R` in `result`, as `invokeHandlerOnReturn` does once it has
    /// cast the return type.
    private static func returnValue<R: Codable>(of type: R.Type, in result: UnsafeMutableRawPointer, to handler: PortResultHandler) {
        handler.answer(result.assumingMemoryBound(to: R.self).pointee)
    }
}

// The runtime's entry points, as the `Distributed` module declares them (there with
// `Builtin.RawPointer`, which a raw pointer is, for the buffers). Declared once, here: the
// bench's `distributed-runtime` floor enters the runtime through them too, so a toolchain
// that changes their signatures needs them changed in this one place.

/// Writes the types of the parameters of the target named by the `length` bytes at `name`
/// into `types` (room for `count`); returns how many, or a negative number when the name
/// does not resolve.
@_silgen_name("swift_func_getParameterTypeInfo")
package func distributedParameterTypes(
    _ name: UnsafePointer<UInt8>, _ length: UInt, _ genericEnvironment: UnsafeRawPointer?,
    _ genericArguments: UnsafeRawPointer?, _ types: UnsafeMutableRawPointer?, _ count: Int
) -> Int32

/// Decodes the target's arguments with `argumentDecoder` (their types in `argumentTypes`),
/// calls it on `actor`, and leaves its result in `resultBuffer`.
@_silgen_name("swift_distributed_execute_target")
package func distributedExecuteTarget<D: DistributedTargetInvocationDecoder>(
    on actor: AnyObject, _ targetName: UnsafePointer<UInt8>, _ targetNameLength: UInt, argumentDecoder: inout D,
    argumentTypes: UnsafeRawPointer?, resultBuffer: UnsafeMutableRawPointer, substitutions: UnsafeRawPointer?,
    witnessTables: UnsafeRawPointer?, numWitnessTables: UInt
) async throws
