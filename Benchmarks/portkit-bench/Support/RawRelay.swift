import Glibc

/// The far half of a raw relay: a thread echoing `size`-byte messages on one end of a Unix
/// socket pair, as an owner process behind a gateway would answer. A relaying thread
/// passes each message over the other end (`pass`) before it answers its own caller:
/// the floor of any relay, measured beside a gateway's.
struct RawRelay: Sendable {
    private let near: CInt
    private let owner: CInt
    private let thread: PosixThread

    init(size: Int) throws {
        (near, owner) = try RawSockets.streamPair()
        let owner = self.owner
        thread = try PosixThread.start(name: "bench-relay-owner") {
            var buffer = [UInt8](repeating: 0, count: size)
            while buffer.withUnsafeMutableBytes({ RawIO.readAll(owner, $0) && RawIO.writeAll(owner, UnsafeRawBufferPointer($0)) }) {}
        }
    }

    /// Passes `bytes` to the owner and reads its echo back into them; false when it is gone.
    func pass(_ bytes: UnsafeMutableRawBufferPointer) -> Bool {
        RawIO.writeAll(near, UnsafeRawBufferPointer(bytes)) && RawIO.readAll(near, bytes)
    }

    /// Ends the owner's thread (it reads the end of the stream) and closes both ends.
    func stop() {
        close(near)
        thread.join()
        close(owner)
    }
}
