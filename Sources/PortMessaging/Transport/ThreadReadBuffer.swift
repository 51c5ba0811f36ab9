import Glibc

/// The buffer a thread reads connections into: one per thread, not one per connection.
///
/// A read decodes every whole frame from the buffer before it returns, and keeps a frame
/// begun but not ended in the connection (its splitter, or a `LargeFrame`), so nothing
/// refers to the buffer between two reads, and the connections a thread reads one after
/// the other can share it. An idle connection then holds no buffer at all: what a server
/// keeps per client is its connection's state, not a read buffer per client. The buffer is
/// made on a thread's first read and freed when the thread exits; its pages are the
/// kernel's until a read fills them.
enum ThreadReadBuffer {
    /// The key of the thread-specific pointer; its destructor frees the buffer.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let made = pthread_key_create(&key) { pointer in pointer?.deallocate() }
        precondition(made == 0, "pthread_key_create: \(made)")
        return key
    }()

    /// The calling thread's buffer, `Connection.readChunk` bytes of uninitialized memory.
    static var current: UnsafeMutableRawBufferPointer {
        if let pointer = pthread_getspecific(key) {
            return UnsafeMutableRawBufferPointer(start: pointer, count: Connection.readChunk)
        }
        let pointer = UnsafeMutableRawPointer.allocate(byteCount: Connection.readChunk, alignment: 16)
        pthread_setspecific(key, pointer)
        return UnsafeMutableRawBufferPointer(start: pointer, count: Connection.readChunk)
    }
}
