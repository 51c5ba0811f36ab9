// port-thread-checkin: a boss thread and a worker thread check in and talk through ports,
// in the two styles of the seeds.
//
// (a) NSMachPort style: the boss makes a receive port and starts a worker thread (a
//     `PermanentThread`) with a send port to it. The worker schedules its own receive port
//     and checks in (message id 100), which hands the boss a send port to the worker. Then
//     both send one-way messages.
// (b) CFMessagePort style: request/reply. The worker's handler returns the reply; the boss
//     says how long to wait to send (send timeout) and for the reply (receive timeout).
//
// Run: swift run port-thread-checkin
import Foundation
import PermanentThread
import PortMessaging

// The message ids of this example (100 is the check-in's own).
let hello: UInt32 = 1
let shout: UInt32 = 2
let slowly: UInt32 = 3

print("(a) NSMachPort style: check-in, then messages both ways")

// The boss is the main thread. Its port's handler runs on the main thread's loop, whenever
// the main thread runs that loop.
let bossLoop = ThreadLoop.current
let bossPort = ReceivePort()
try bossPort.schedule(on: bossLoop) { message in
    print("   boss   got #\(message.id): \(message.text)")
    return nil
}

// The worker: a permanent thread (it sleeps in its run loop between messages) with a port
// of its own. The port lives as long as this variable; the handler runs on the worker.
let toBoss = bossPort.makeSendPort()
let workerPort = ReceivePort()
let worker = PermanentThread(name: "worker")
try worker.run()
try worker.execute {
    // On the worker thread: receive on this thread's loop, then tell the boss where.
    try! workerPort.schedule(on: .current) { message in
        switch message.id {
        case hello:
            print("   worker got #\(message.id): \(message.text)")
            try? toBoss.send(Message(id: hello, text: "hello, boss"))
            return nil
        case shout:
            // A request: what the handler returns is the reply.
            return Message(id: shout, text: message.text.uppercased())
        case slowly:
            Thread.sleep(forTimeInterval: 0.2)
            return Message(id: slowly, text: "sorry, that took a while")
        default:
            return nil
        }
    }
    try! PortCheckIn.checkIn(to: toBoss, from: workerPort)
}

// Waiting for the check-in runs the boss's loop, so the check-in message is received.
let toWorker = try PortCheckIn.awaitWorker(on: bossPort, timeout: .seconds(5))
print("   boss: the worker checked in (message id \(PortCheckIn.defaultMessageID))")

try toWorker.send(Message(id: hello, text: "hello, worker"))
// The worker's answer arrives on the boss's port: run the boss's loop until it is handled.
_ = try bossLoop.run(mode: .default, until: .now + .seconds(5), returnAfterSourceHandled: true)

print("(b) CFMessagePort style: request/reply with send and receive timeouts")

let reply = try toWorker.blockingRequest(
    Message(id: shout, text: "ports are fun"), sendTimeout: .seconds(1), receiveTimeout: .seconds(1))
print("   boss: reply #\(reply.id): \(reply.text)")

do {
    // The worker takes 200 ms; the boss waits 50 ms for the reply and gives up.
    _ = try toWorker.blockingRequest(
        Message(id: slowly, text: "take your time"), sendTimeout: .seconds(1), receiveTimeout: .milliseconds(50))
} catch PortError.receiveTimedOut {
    print("   boss: no reply within 50 ms: receiveTimedOut (the late reply is dropped)")
}

// Shut down: the worker's port goes, then the thread (stop() waits until it has exited).
workerPort.invalidate()
worker.stop()
bossPort.invalidate()
print("   the worker thread has stopped")
print("done.")
