// port-child-checkin: a parent and a child process check in over pipes, send messages
// both ways, make a request, and shut down cleanly.
//
// The same executable is both: run without arguments it is the parent, which starts itself
// again with `--child`. `ChildWorker.spawn` gives the child two pipes to the parent's port
// (pipes carry bytes only; use `channel: .socket` to pass ports or file descriptors).
//
// Run: swift run port-child-checkin
import Foundation
import PermanentThread
import PortMessaging
import Synchronization

// The message ids of this example (100 is the check-in's own).
let note: UInt32 = 1
let measure: UInt32 = 2
let shutDown: UInt32 = 3

/// Prints a line at once, so that the parent's and the child's lines come in order.
func say(_ line: String) {
    print(line)
    fflush(nil)
}

/// The child: checks in with the parent, serves its messages, ends when told to.
func child() throws -> Int32 {
    let parent = try ChildWorker.bossPort()  // the pipes the parent gave us
    let loop = ThreadLoop.current
    let port = ReceivePort()
    try port.schedule(on: loop) { message in
        switch message.id {
        case note:
            say("   child  got: \(message.text)")
            try? parent.send(Message(id: note, text: "hello back from child \(getpid())"))
            return nil
        case measure:
            // A request: what the handler returns is the reply.
            return Message(id: measure, text: "\(message.text.split(separator: " ").count) words")
        case shutDown:
            loop.stop()  // ends `loop.run()` below
            return nil
        default:
            return nil
        }
    }
    // If the parent goes away without a word, stop too.
    try parent.onInvalidation(on: loop) { _ in loop.stop() }
    try PortCheckIn.checkIn(to: parent, from: port)
    try loop.run()
    say("   child: loop stopped, exiting")
    return 0
}

/// The parent: starts the child, checks it in, talks to it, shuts it down.
func parent() throws -> Int32 {
    let loop = ThreadLoop.current
    let port = ReceivePort()
    let heard = Atomic<Int>(0)
    try port.schedule(on: loop) { message in
        say("   parent got: \(message.text)")
        heard.add(1, ordering: .relaxed)
        return nil
    }
    let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    let worker = try ChildWorker.spawn(executable: me, arguments: ["--child"], bossPort: port, channel: .pipes)
    // Waiting for the check-in runs this thread's loop, which reads the pipe.
    let toChild = try PortCheckIn.awaitWorker(on: port, timeout: .seconds(10))
    say("parent: child \(worker.pid) checked in over pipes")

    // Messages both ways: the child answers the parent's note with one of its own, which
    // arrives when this thread runs its loop.
    try toChild.send(Message(id: note, text: "hello from the parent"))
    let deadline = ContinuousClock.now + .seconds(5)
    while heard.load(ordering: .relaxed) == 0 && ContinuousClock.now < deadline {
        _ = try loop.run(mode: .default, until: deadline, returnAfterSourceHandled: true)
    }

    // Request/reply: the reply is read by this thread's loop while the request waits.
    let reply = try toChild.blockingRequest(
        Message(id: measure, text: "how many words are in this sentence"), sendTimeout: .seconds(5), receiveTimeout: .seconds(5))
    say("parent: reply: \(reply.text)")

    // A clean shutdown: ask, then wait for the child to exit.
    try toChild.send(Message(id: shutDown))
    let status = worker.wait()
    port.invalidate()
    say("parent: the child exited with status \(status >> 8)")
    return status == 0 ? 0 : 1
}

do {
    exit(CommandLine.arguments.contains("--child") ? try child() : try parent())
} catch {
    say("port-child-checkin: \(error)")
    exit(1)
}
