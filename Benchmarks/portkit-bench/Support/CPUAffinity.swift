import Glibc

/// A set of CPUs, as `sched_setaffinity` takes it.
struct CPUSet: Equatable {
    fileprivate var raw = cpu_set_t()

    private static let wordBits = UInt.bitWidth
    private static let capacity = MemoryLayout<cpu_set_t>.size * 8

    /// An empty set, or the set of `cpus`.
    init(_ cpus: [Int] = []) {
        for cpu in cpus { insert(cpu) }
    }

    /// Adds `cpu` (0 ..< 1024).
    mutating func insert(_ cpu: Int) {
        precondition(cpu >= 0 && cpu < Self.capacity, "CPU \(cpu) out of range")
        withUnsafeMutableBytes(of: &raw) { bytes in
            let offset = cpu / Self.wordBits * MemoryLayout<UInt>.size
            let word = bytes.load(fromByteOffset: offset, as: UInt.self) | (1 << UInt(cpu % Self.wordBits))
            bytes.storeBytes(of: word, toByteOffset: offset, as: UInt.self)
        }
    }

    /// The CPUs in the set, ascending.
    var cpus: [Int] {
        withUnsafeBytes(of: raw) { bytes in
            (0..<Self.capacity).filter { cpu in
                let word = bytes.load(fromByteOffset: cpu / Self.wordBits * MemoryLayout<UInt>.size, as: UInt.self)
                return word & (1 << UInt(cpu % Self.wordBits)) != 0
            }
        }
    }

    static func == (lhs: CPUSet, rhs: CPUSet) -> Bool { lhs.cpus == rhs.cpus }
}

/// Which CPUs a thread may run on. The wake benchmarks pin the caller and the loop's thread,
/// so that where the scheduler puts them (together or apart) does not change from run to
/// run or from impl to impl.
enum CPUAffinity {
    private typealias AffinityCall = @convention(c) (pid_t, Int, UnsafeMutablePointer<cpu_set_t>) -> CInt

    /// `sched_getaffinity` and `sched_setaffinity` are GNU extensions that the Swift Glibc
    /// module does not import (nor does CPortKitSystem): look them up in the C library.
    private static func call(_ name: String) throws(BenchmarkError) -> AffinityCall {
        guard let symbol = dlsym(nil, name) else { throw .system(operation: "dlsym(\(name))", errno: ENOSYS) }
        return unsafeBitCast(symbol, to: AffinityCall.self)
    }

    /// The CPUs thread `threadID` (0: the calling thread) may run on.
    /// - Throws: `BenchmarkError.system`; the corresponding C function is `sched_getaffinity`.
    static func allowed(threadID: pid_t = 0) throws(BenchmarkError) -> CPUSet {
        var set = CPUSet()
        guard try call("sched_getaffinity")(threadID, MemoryLayout<cpu_set_t>.size, &set.raw) == 0 else {
            throw .lastSystemError("sched_getaffinity(\(threadID))")
        }
        return set
    }

    /// Restricts thread `threadID` (0: the calling thread) to `set`.
    /// - Throws: `BenchmarkError.system`; the corresponding C function is `sched_setaffinity`.
    static func restrict(threadID: pid_t = 0, to set: CPUSet) throws(BenchmarkError) {
        var set = set
        guard try call("sched_setaffinity")(threadID, MemoryLayout<cpu_set_t>.size, &set.raw) == 0 else {
            throw .lastSystemError("sched_setaffinity(\(threadID))")
        }
    }

    /// Runs `body` with the calling thread restricted to the last CPU it may use, then gives
    /// it its CPUs back: a process `body` spawns lives there, with every thread it makes,
    /// away from the first CPU (where `WakePlacement.together` puts this process).
    static func onLastCPU<T>(_ body: () throws -> T) throws -> T {
        let was = try allowed()
        guard let last = was.cpus.last else { return try body() }
        try restrict(to: CPUSet([last]))
        defer { try? restrict(to: was) }
        return try body()
    }
}
