import Foundation
import Glibc
@testable import NamedPortServer
import PermanentThread
import PortMessaging
import Testing
import PortKitLocks

@Suite("PortRegistry: names for ports between threads")
struct PortRegistryTests {
    @Test func registerLookUpAndRemove() throws {
        let registry = PortRegistry()
        let loop = PortLoop()
        let receiver = try loop.port { Array("worker got \($0.text)".utf8) }
        let port = receiver.makeSendPort()
        try registry.register("worker", port: port)
        let found = try #require(registry.lookup("worker"))
        #expect(found === port)
        #expect(try ask(found, "job") == "worker got job")
        #expect(registry.names == ["worker"])
        #expect(registry.remove("worker") === port)
        #expect(registry.lookup("worker") == nil)
        #expect(registry.names.isEmpty)
        receiver.invalidate()
    }

    @Test func aTakenNameIsRefusedWithThisProcess() throws {
        let registry = PortRegistry()
        let first = ReceivePort(), second = ReceivePort()
        try registry.register("db", port: first.makeSendPort())
        #expect(throws: NameServerError.nameTaken(name: "db", ownerPID: getpid())) {
            try registry.register("db", port: second.makeSendPort())
        }
        #expect(throws: NameServerError.invalidName(name: "a/b", reason: .slash)) {
            try registry.register("a/b", port: second.makeSendPort())
        }
    }

    @Test func anInvalidatedPortsEntryGoesAway() throws {
        let registry = PortRegistry()
        let receiver = ReceivePort()
        try registry.register("short-lived", port: receiver.makeSendPort())
        #expect(registry.lookup("short-lived") != nil)
        receiver.invalidate()
        #expect(registry.lookup("short-lived") == nil)
        #expect(registry.names.isEmpty)
        // The name is free again.
        let next = ReceivePort()
        try registry.register("short-lived", port: next.makeSendPort())
        #expect(registry.lookup("short-lived")?.isValid == true)
        // An invalidated send port frees its name too.
        let send = next.makeSendPort()
        #expect(registry.remove("short-lived", ifHolding: send) == false)
        try registry.register("other", port: send)
        send.invalidate()
        #expect(registry.lookup("other") == nil)
    }

    @Test func standbysTakeTheNameInTheOrderTheyQueuedAndAReplaceableHolderGivesWay() throws {
        let registry = PortRegistry()
        let owner = ReceivePort(), first = ReceivePort(), second = ReceivePort(), taker = ReceivePort()
        let (ownerPort, firstPort, secondPort) = (owner.makeSendPort(), first.makeSendPort(), second.makeSendPort())
        #expect(try registry.register("db", port: ownerPort) == .registered)
        #expect(try registry.register("db", port: firstPort, ifTaken: .queue, replaceable: true) == .queued)
        #expect(try registry.register("db", port: secondPort, ifTaken: .queue) == .queued)
        #expect(registry.lookup("db") === ownerPort)
        // The holder's port dies: the first standby holds the name at the next read.
        owner.invalidate()
        #expect(registry.lookup("db") === firstPort)
        // Replaceable: a replace takes it, and the second standby still waits behind.
        #expect(throws: NameServerError.nameTaken(name: "db", ownerPID: getpid())) {
            try registry.register("db", port: taker.makeSendPort())
        }
        let takerPort = taker.makeSendPort()
        #expect(try registry.register("db", port: takerPort, ifTaken: .replace) == .registered)
        #expect(registry.lookup("db") === takerPort)
        #expect(throws: NameServerError.nameTaken(name: "db", ownerPID: getpid())) {
            try registry.register("db", port: first.makeSendPort(), ifTaken: .replace)
        }
        registry.remove("db", ifHolding: takerPort)
        #expect(registry.lookup("db") === secondPort)
        registry.remove("db")
        #expect(registry.lookup("db") == nil)
        for port in [first, second, taker] { port.invalidate() }
    }

    @Test func aLookupWaitsForTheNameFromAnotherThread() throws {
        let registry = PortRegistry()
        let receiver = ReceivePort()
        let registered = ConditionLock(false)
        let thread = Thread {
            _ = registered.wait(until: .now + .seconds(20)) { $0 ? true : nil }
            _ = try? registry.register("late", port: receiver.makeSendPort())
        }
        thread.start()
        registered.withLock { $0 = true }
        registered.broadcast()
        let found = try registry.lookup("late", waitingUpTo: .seconds(20))
        #expect(found.isValid)
        #expect(throws: NameServerError.waitTimedOut(operation: "waiting for 'never' in the process registry")) {
            try registry.lookup("never", waitingUpTo: .milliseconds(20))
        }
    }

    @Test func manyThreadsRegisterAndLookUpConcurrently() throws {
        let registry = PortRegistry()
        let receivers = (0..<64).map { _ in ReceivePort() }
        DispatchQueue.concurrentPerform(iterations: 64) { index in
            _ = try? registry.register("t.\(index)", port: receivers[index].makeSendPort())
            _ = registry.lookup("t.\((index + 1) % 64)")
        }
        #expect(registry.names.count == 64)
        DispatchQueue.concurrentPerform(iterations: 64) { index in
            _ = registry.remove("t.\(index)")
        }
        #expect(registry.names.isEmpty)
    }
}
