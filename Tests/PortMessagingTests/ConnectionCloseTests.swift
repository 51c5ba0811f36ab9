import CPortKitSystem
import Foundation
import Glibc
import PermanentThread
import PortKitTestSupport
import Testing
@testable import PortMessaging
import PortKitSystem
import PortKitLocks

/// A closed connection ends its socket for the peer at once, wherever the close comes from,
/// and wakes a thread still waiting on the socket (a close shuts the socket down only when
/// that can change something: another thread in a call on it, a release left to a loop, or
/// a duplicate held by a watcher).
@Suite("Closing a connection")
struct ConnectionCloseTests {
    /// Reads `socket` until its peer's end (a read of 0 bytes), skipping what came before;
    /// false if the end did not come within the deadline.
    private func readsTheEnd(of socket: FileDescriptor) throws -> Bool {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while try socket.poll(CShort(POLLIN), timeout: .seconds(30)) != 0 {
            let count = buffer.withUnsafeMutableBytes { read(socket.rawValue, $0.baseAddress, $0.count) }
            if count == 0 { return true }
            if count < 0 && errno != EAGAIN && errno != EINTR { return false }
        }
        return false
    }

    /// A send port read by no loop, invalidated on the thread that used it: the peer reads
    /// the message it sent, then the end.
    @Test func anInvalidatedSendPortsPeerReadsTheEnd() throws {
        let (mine, theirs) = try Connection.makeSocketPair()
        defer { try? theirs.close() }
        let sender = SendPort(connection: Connection(.socket(mine)))
        try sender.send(Message(id: 7, text: "last"), timeout: .seconds(30))
        sender.invalidate()
        let frames = try readFrames(from: theirs) { !$0.isEmpty }
        #expect(frames.map(\.id) == [7])
        #expect(try readsTheEnd(of: theirs))
    }

    /// A port's connection, bound to its loop, closed from another thread and from the
    /// loop's own: the peer reads the end both ways.
    @Test(arguments: [false, true])
    func aPortsConnectionClosedOnOrOffItsLoopEndsForThePeer(onLoop: Bool) throws {
        let served = ServedPort { Message(id: $0.id, text: "re") }
        defer { served.stop() }
        let (theirs, mine) = try Connection.makeSocketPair()
        defer { try? mine.close() }
        try served.port.adoptConnection(theirs)
        let client = SendPort(connection: Connection(.socket(try mine.duplicate())))
        defer { client.invalidate() }
        // Answered: the connection is bound to the port's loop.
        #expect(try client.blockingRequest(Message(id: 1), receiveTimeout: .seconds(30)).id == 1)
        if onLoop {
            try served.thread.loop.perform { served.port.invalidate() }
        } else {
            served.port.invalidate()
        }
        #expect(try readsTheEnd(of: mine))
    }

    /// A thread waiting for room to write (its peer reads nothing) is woken by the send
    /// port's invalidation on another thread: its send fails at once as invalid, not when its send
    /// timeout passes.
    @Test func invalidatingASendPortWakesTheThreadWaitingForRoom() throws {
        let (mine, theirs) = try Connection.makeSocketPair()
        defer { try? theirs.close() }
        let sender = SendPort(connection: Connection(.socket(mine)))
        let outcome = Locked<Result<Void, PortError>?>(nil)
        let writerID = Locked<Int32?>(nil)
        let writer = Thread {
            writerID.withLock { $0 = portkit_gettid() }
            let big = Message(id: 3, bytes: [UInt8](repeating: 1, count: 4 << 20))
            let result = Result { () throws(PortError) in
                // More than the socket holds: the write waits for room that never comes.
                for _ in 0..<4 { try sender.send(big, timeout: .seconds(600)) }
            }
            outcome.withLock { $0 = result }
        }
        writer.start()
        let id = try #require(eventually { writerID.withLock { $0 } != nil } ? writerID.withLock { $0 } : nil)
        // Asleep with nothing read: waiting for room (a socket buffer holds far less).
        #expect(eventually { schedulerState(ofThread: id) == "S" })
        sender.invalidate()
        #expect(eventually(timeout: .seconds(60)) { outcome.withLock { $0 } != nil })
        let result = outcome.withLock { $0 }
        #expect(throws: PortError.invalidPort) { try result?.get() }
    }
}
