import CPortKitSystem
import Glibc

/// The calling thread as the kernel knows it: its id, whether it is the process's main
/// thread, and its name. The loop's registry and the permanent threads ask here, so that
/// another platform's answers are one file.
package enum ThreadIdentity {
    /// The calling thread's kernel id (as in `/proc/self/task/<id>`). The corresponding C
    /// function is `gettid`.
    package static var kernelID: CInt { portkit_gettid() }

    /// Whether the calling thread is the process's main thread (its kernel id is the
    /// process's id).
    package static var isMainThread: Bool { getpid() == portkit_gettid() }

    /// The calling thread's name (as `ps -L` shows it). The corresponding C function is
    /// `pthread_getname_np`.
    package static var name: String {
        var buffer = [CChar](repeating: 0, count: 32)
        portkit_get_thread_name(&buffer, buffer.count)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Names the calling thread (as `ps -L` and debuggers show it; the kernel keeps 15
    /// bytes). The corresponding C function is `pthread_setname_np`.
    package static func setName(_ name: String) {
        _ = name.withCString { portkit_set_thread_name($0) }
    }

    /// Sets the calling thread's timer slack: how late the kernel may end its timed sleeps,
    /// to batch wake-ups (50 µs by default). The corresponding C function is `prctl`
    /// (`PR_SET_TIMERSLACK`).
    package static func setTimerSlack(nanoseconds: UInt) {
        _ = portkit_set_timer_slack(nanoseconds)
    }

    /// How many CPUs the calling thread may run on (its affinity mask; 1 if it cannot be
    /// read). The corresponding C function is `sched_getaffinity`.
    package static var allowedCPUCount: Int { Int(portkit_allowed_cpu_count()) }
}
