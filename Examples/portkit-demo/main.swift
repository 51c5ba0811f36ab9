// portkit-demo: PortKit end to end, with readable output; exits 0.
//
//   1. a run loop: a repeating timer, an observer, a block from another thread;
//   2. a permanent thread: work offloaded to it, a value back, an error back, a stop;
//   3. ports: a worker thread and a child process check in; messages and request/reply;
//   4. names: an embedded name server; the worker thread's port registered by name; a child
//      process looks the name up and does request/reply; a clean shutdown.
import Foundation
import NamedPortServer
import PermanentThread
import PortMessaging
import Synchronization

/// The child half of part 3 (this same program, re-run with `--child`).
if CommandLine.arguments.dropFirst().first == "--child" {
    let boss = try ChildWorker.bossPort()
    let port = ReceivePort()
    try port.schedule(on: .current) { request in
        Message(id: request.id, text: "child \(getpid()) says: \(request.text.uppercased())")
    }
    try boss.onInvalidation { _ in exit(0) }   // the parent went away: so do we
    try PortCheckIn.checkIn(to: boss, from: port)
    try ThreadLoop.current.run()
    exit(0)
}

/// The child half of part 4: find "demo.greeter" through the name server and ask it.
if CommandLine.arguments.dropFirst().first == "--lookup", CommandLine.arguments.count > 2 {
    let names = try NameServerClient.blockingConnect(to: CommandLine.arguments[2])
    let greeter = try names.blockingLookup("demo.greeter", waitingUpTo: .seconds(10))
    let reply = try greeter.blockingRequest(Message(id: 1, text: "who are you?"), sendTimeout: .seconds(5), receiveTimeout: .seconds(5))
    print("   child \(getpid()) looked up demo.greeter and got: \(reply.text)")
    names.close()
    exit(0)
}

print("PortKit demo\n")

// MARK: 1. A run loop
print("1. A run loop of its own: a repeating timer, an observer, a block from another thread.")
let loopThread = PermanentThread(name: "demo-loop")
try loopThread.run()
let finished = DispatchSemaphore(value: 0)
try loopThread.execute {
    let loop = ThreadLoop.current
    let observer = LoopObserver(activities: [.beforeWaiting, .afterWaiting]) { _, activity in
        print("   observer: \(activity)")
    }
    try? loop.add(observer, forMode: .default)
    let ticks = Mutex(0)
    let timer = LoopTimer(after: .milliseconds(20), repeating: .milliseconds(20)) { timer in
        let n = ticks.withLock { $0 += 1; return $0 }
        print("   timer tick \(n)")
        if n == 3 {
            timer.invalidate()
            observer.invalidate()
            finished.signal()
        }
    }
    try? loop.add(timer, forMode: .default)
}
try loopThread.loop?.perform { print("   a block performed from the main thread ran on \"demo-loop\"") }
finished.wait()
loopThread.stop()
print("   stopped; the thread has exited.\n")

// MARK: 2. A permanent thread
print("2. A permanent thread: offload work, get values and errors back.")
let worker = PermanentThread(name: "demo-worker")
try worker.run()
for i in 1...3 {
    try worker.execute(label: "job \(i)") { print("   job \(i) ran on the worker") }
}
let sum = try worker.sync { (1...100).reduce(0, +) }
print("   sync returned \(sum)")
struct DemoError: Error {}
do {
    _ = try worker.sync { () throws -> Int in throw DemoError() }
} catch {
    print("   sync rethrew \(error)")
}
let squared = try await worker.submit { 12 * 12 }
print("   submit (async) returned \(squared)")
worker.stop()
do {
    try worker.execute {}
} catch {
    print("   execute after stop: \(error)\n")
}

// MARK: 3. Ports
print("3. Ports: the check-in protocol with a worker thread and with a child process.")
let bossThread = PermanentThread(name: "demo-boss")
try bossThread.run()
let bossPort = ReceivePort()
try bossPort.schedule(on: bossThread.loop!) { message in
    print("   boss received id \(message.id): \(message.text)")
    return nil
}
let toBoss = bossPort.makeSendPort()

let threadWorker = PermanentThread(name: "demo-port-worker")
try threadWorker.run()
try threadWorker.execute {
    let port = ReceivePort()
    try? port.schedule(on: .current) { Message(id: $0.id, text: "thread worker did \($0.text)") }
    try? PortCheckIn.checkIn(to: toBoss, from: port)
    try? toBoss.send(Message(id: 2, text: "hello from the worker thread"), timeout: .seconds(5))
}
let threadPort = try PortCheckIn.awaitWorker(on: bossPort, timeout: .seconds(10))
print("   worker thread checked in")
print("   reply: \(try threadPort.blockingRequest(Message(id: 3, text: "job A")).text)")

let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
fflush(nil)
let child = try ChildWorker.spawn(executable: me, arguments: ["--child"], bossPort: bossPort)
let childPort = try PortCheckIn.awaitWorker(on: bossPort, timeout: .seconds(10))
print("   child process \(child.pid) checked in")
let reply = try childPort.blockingRequest(Message(id: 4, text: "hello child"), sendTimeout: .seconds(5), receiveTimeout: .seconds(5))
print("   reply: \(reply.text)")

childPort.invalidate()        // the child sees us go and exits
child.wait()
print("   child exited\n")

// MARK: 4. Names
print("4. Names: an embedded name server, a port registered by name, a child that looks it up.")
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("portkit-demo-\(getpid())")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                        attributes: [.posixPermissions: 0o700])
let address = directory.appendingPathComponent("names.sock").path
let nameServer = try NameServer.embedded(at: address)   // one call; other processes find it at `address`
print("   name server listening at \(address)")
let names = try NameServerClient.blockingConnect(to: address)
let greeter = try threadWorker.sync { () throws -> ReceivePort in
    let port = ReceivePort()
    try port.schedule(on: .current) { Message(id: $0.id, text: "demo.greeter, served by the worker thread") }
    return port
}
try names.blockingRegister("demo.greeter", port: greeter)
print("   the worker thread's port is registered as demo.greeter")
fflush(nil)  // our buffered lines first, then the child's
let lookup = Process()
lookup.executableURL = URL(fileURLWithPath: me)
lookup.arguments = ["--lookup", address]
try lookup.run()
lookup.waitUntilExit()
if lookup.terminationStatus != 0 { print("   the lookup child failed with status \(lookup.terminationStatus)") }
try names.blockingUnregister("demo.greeter")
names.close()
greeter.invalidate()
nameServer.stop()
try? FileManager.default.removeItem(at: directory)
print("   name released, name server stopped")

threadWorker.stop()
bossPort.invalidate()
bossThread.stop()
print("\ndone.")
