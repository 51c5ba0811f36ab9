import CPortKitSystem
import Glibc

/// Every thread of this process restricted to one set of CPUs, and the calling thread to
/// another, until `restore`. For cases whose baseline's threads cannot be pinned one by one
/// (Dispatch's workers are made and picked by Dispatch): pinning them all, at the start of
/// each run, fixes where every impl's threads run. A thread made during the run inherits
/// the set of the thread that made it.
struct ProcessPinning {
    private let previous: [(threadID: pid_t, cpus: CPUSet)]

    /// Restricts every thread but the caller to `placement`'s loop CPUs and the caller to its
    /// caller CPUs. A thread that ends meanwhile is skipped.
    /// - Throws: `BenchmarkError.system` when `/proc/self/task` cannot be read or the
    ///   caller cannot be restricted.
    static func pin(_ placement: WakePlacement) throws(BenchmarkError) -> ProcessPinning {
        let cpus = try placement.cpus()
        let caller = pid_t(portkit_gettid())
        var previous: [(threadID: pid_t, cpus: CPUSet)] = []
        for threadID in try threadIDs() {
            guard let was = try? CPUAffinity.allowed(threadID: threadID) else { continue }
            let set = threadID == caller ? cpus.caller : cpus.loop
            do {
                try CPUAffinity.restrict(threadID: threadID, to: set)
                previous.append((threadID, was))
            } catch where threadID != caller {
                continue
            }
        }
        return ProcessPinning(previous: previous)
    }

    /// Gives every thread pinned its set of before back.
    func restore() {
        for (threadID, cpus) in previous { try? CPUAffinity.restrict(threadID: threadID, to: cpus) }
    }

    /// The kernel ids of the process's threads, from `/proc/self/task`.
    private static func threadIDs() throws(BenchmarkError) -> [pid_t] {
        guard let directory = opendir("/proc/self/task") else { throw .lastSystemError("opendir /proc/self/task") }
        defer { closedir(directory) }
        var ids: [pid_t] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let id = pid_t(name) { ids.append(id) }
        }
        return ids
    }
}

extension BenchmarkCase {
    /// This case under another name, with `impls` only (all of them when `nil`), each run of
    /// each impl made with every thread of this process on `placement`'s CPUs
    /// (`ProcessPinning`). With `.together` a case whose threads are all in this process
    /// measures what its code costs on one CPU, handing over by context switches, free of
    /// where the scheduler puts each thread and of what waking a halted CPU costs this
    /// virtual machine from one invocation to the next.
    func pinned(_ placement: WakePlacement, as name: String, impls kept: Set<String>? = nil) -> BenchmarkCase {
        let impls = impls.filter { kept?.contains($0.name) ?? true }.map { impl in
            BenchmarkImpl(impl.name, size: impl.size) {
                let instance = try impl.start()
                return .init(
                    measure: { () throws -> RunSample in
                        let pinning = try ProcessPinning.pin(placement)
                        defer { pinning.restore() }
                        return try instance.measure()
                    },
                    stop: instance.stop)
            }
        }
        return BenchmarkCase(name: name, unit: unit, impls: impls)
    }
}
