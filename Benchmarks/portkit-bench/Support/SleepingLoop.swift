import Glibc

/// A thread that sleeps in the kernel (epoll or a futex) until given a block: what the
/// wake cases wake.
protocol SleepingLoop: Sendable {
    /// The kernel id of the loop's thread.
    var threadID: CInt { get }
    /// Has the loop's thread run `block` soon, waking it if it sleeps.
    func post(_ block: @escaping @Sendable () -> Void) throws
    /// Ends the loop and joins its thread.
    func shutDown()
}

extension PortKitLoopThread: SleepingLoop {}
extension RawEpollLoop: SleepingLoop {}
extension ConditionQueueThread: SleepingLoop {}

/// Where a wake case puts the caller and the loop's thread. Pinning both keeps the
/// scheduler's choice (same CPU or not) from changing between runs and between impls.
enum WakePlacement {
    /// On two different CPUs: the loop wakes on an idle CPU while the caller spins.
    case apart
    /// Both on one CPU: the woken loop must preempt the spinning caller.
    case together

    /// The CPUs for the caller and for the loop, among those the calling thread may use.
    func cpus() throws(BenchmarkError) -> (caller: CPUSet, loop: CPUSet) {
        let allowed = try CPUAffinity.allowed().cpus
        guard let first = allowed.first else { throw .system(operation: "sched_getaffinity: no CPU", errno: EINVAL) }
        switch self {
        case .together:
            return (CPUSet([first]), CPUSet([first]))
        case .apart:
            guard allowed.count > 1 else {
                printError("portkit-bench: only CPU \(first) is available; the wake case runs caller and loop on it")
                return (CPUSet([first]), CPUSet([first]))
            }
            return (CPUSet([first]), CPUSet([allowed[1]]))
        }
    }
}
