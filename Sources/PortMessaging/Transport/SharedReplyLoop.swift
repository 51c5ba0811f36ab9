import Glibc
import PermanentThread

/// The loop that serves async waits no other loop serves: it reads the replies of
/// connections that no port's loop reads, and it runs receive timeouts. One permanent
/// thread for the whole process, started by the first async request that needs it, and
/// kept for the life of the process (idle, it sleeps in the kernel). The layers above use
/// it for the same job: a name watch iterated by a task has its port here.
package enum SharedReplyLoop {
    /// The thread, or `nil` when it could not be started.
    private static let thread: PermanentThread? = {
        let thread = PermanentThread(name: "portkit-replies")
        do { try thread.run() } catch { return nil }
        return thread
    }()

    /// The shared loop, started on first use.
    /// - Throws: `.system` when its thread cannot be started.
    package static func loop() throws(PortError) -> ThreadLoop {
        guard let loop = thread?.loop else { throw .system(operation: "start the reply thread", errno: EAGAIN) }
        return loop
    }
}
