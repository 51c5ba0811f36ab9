import Foundation
import PermanentThread
import Synchronization

/// Makes 100 threads that each use a loop (with a timer) and end; prints
/// "before=N after=M" — the open descriptor counts before and after.
@Sendable func loopDescriptorCycle(_ arguments: [String]) -> Int32 {
    func runThreads(_ count: Int) {
        let threads = (0..<count).map { _ in
            JoinableThread {
                let loop = ThreadLoop.current
                let timer = LoopTimer(after: .milliseconds(1)) { _ in }
                try! loop.add(timer, forMode: .default)
                _ = try! loop.run(mode: .default, until: .now + .seconds(30))
            }
        }
        // Joining waits for the thread-exit destructors, which end the loops.
        for thread in threads { thread.join() }
    }
    runThreads(1)  // warm up what the runtime opens once
    let before = openDescriptorCount()
    for _ in 0..<10 { runThreads(10) }
    say("before=\(before) after=\(openDescriptorCount())")
    return 0
}

/// Entries of /proc/self/fd, less the one used to list them.
func openDescriptorCount() -> Int {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count ?? 0) - 1
}

/// A pthread that can be joined (Foundation's threads are detached).
final class JoinableThread: Sendable {
    private let handle: pthread_t

    init(_ body: @escaping @Sendable () -> Void) {
        final class Box: Sendable { let body: @Sendable () -> Void; init(_ b: @escaping @Sendable () -> Void) { body = b } }
        var handle = pthread_t()
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let status = pthread_create(&handle, nil, { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, box)
        precondition(status == 0, "pthread_create failed: \(status)")
        self.handle = handle
    }

    func join() { pthread_join(handle, nil) }
}
