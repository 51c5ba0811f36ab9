import Glibc
import Testing
import PortKitTestSupport

import PortKitSystem
import PortKitLocks

/// The fault seam and the `EINTR` policy at the System layer itself, on plain pipes: what
/// the layers above count on (SystemFaultTests, in PortMessagingTests, shows how ports
/// handle each fault).
@Suite("System: the fault seam and the EINTR policy")
struct FaultSeamTests {
    /// A pipe with `bytes` written into it, to read and close.
    private func pipe(holding bytes: [UInt8]) throws -> (read: FileDescriptor, write: FileDescriptor) {
        let pipe = try FileDescriptor.pipe(nonBlocking: true)
        _ = try bytes.withUnsafeBytes { try pipe.write.write($0) }
        return pipe
    }

    private func readAll(_ descriptor: FileDescriptor) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = try buffer.withUnsafeMutableBytes { try descriptor.read(into: $0) }
        return Array(buffer.prefix(count))
    }

    @Test func anInterruptedCallIsMadeAgainAndTheCallerNeverSeesEINTR() throws {
        let pipe = try pipe(holding: [1, 2, 3])
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let (bytes, fired) = try FaultSeam.injecting(.failure(.interrupted), on: .read, times: 3) {
            try readAll(pipe.read)
        }
        #expect(fired == 3)
        #expect(bytes == [1, 2, 3])
    }

    /// Any other injected error is the call's typed error, once; the next call is made.
    @Test(arguments: [EAGAIN, EPIPE, EMFILE])
    func anInjectedErrorIsTheCallsTypedErrorOnce(error: CInt) throws {
        let pipe = try pipe(holding: [7])
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let (_, fired) = FaultSeam.injecting(.failure(Errno(rawValue: error)), on: .read) {
            #expect(throws: Errno(rawValue: error)) { try readAll(pipe.read) }
        }
        #expect(fired == 1)
        #expect(try readAll(pipe.read) == [7])
    }

    @Test func aShortWriteMovesAtMostItsLimit() throws {
        let pipe = try FileDescriptor.pipe(nonBlocking: true)
        defer { try? pipe.read.close(); try? pipe.write.close() }
        let (written, fired) = try FaultSeam.injecting(.shortWrite(2), on: .write) {
            try [UInt8]([1, 2, 3, 4, 5]).withUnsafeBytes { try pipe.write.write($0) }
        }
        #expect(fired == 1 && written == 2)
        #expect(try readAll(pipe.read) == [1, 2])
    }

    /// A rule hits only its scope: the arming thread's calls, or one descriptor's.
    @Test func aRuleHitsOnlyItsThreadOrItsDescriptor() throws {
        let onThisThread = FaultSeam.arm(.failure(Errno(rawValue: EMFILE)), on: .pipe)
        defer { FaultSeam.disarm(onThisThread) }
        let elsewhere = Locked<Result<Void, Errno>?>(nil)
        let other = LoopThread(name: "fault-scope") { _ in
            elsewhere.withLock { $0 = Result { () throws(Errno) in
                let pipe = try FileDescriptor.pipe()
                try pipe.read.close()
                try pipe.write.close()
            } }
        }
        #expect(other.join())
        let outcome = try #require(elsewhere.withLock { $0 })
        #expect(throws: Never.self) { try outcome.get() }
        #expect(FaultSeam.fired(onThisThread) == 0)
        #expect(throws: Errno(rawValue: EMFILE)) { try FileDescriptor.pipe() }
        #expect(FaultSeam.disarm(onThisThread) == 1)

        let hit = try pipe(holding: [1]), spared = try pipe(holding: [2])
        defer { for pipe in [hit, spared] { try? pipe.read.close(); try? pipe.write.close() } }
        let onDescriptor = FaultSeam.arm(.failure(.wouldBlock), on: .read, scope: .descriptor(hit.read.rawValue))
        defer { FaultSeam.disarm(onDescriptor) }
        #expect(try readAll(spared.read) == [2])
        #expect(throws: Errno.wouldBlock) { try readAll(hit.read) }
        #expect(try readAll(hit.read) == [1])
        #expect(FaultSeam.disarm(onDescriptor) == 1)
    }
}
