/// A frame's bytes as a writer sends them: a head, and a body that follows it in the
/// stream without being copied next to it (a large message's payload, which the write
/// gathers from the message itself). Most frames are all head.
struct FrameBytes {
    /// The first bytes: the whole frame, or its header and first component's header.
    var head: UnsafeRawBufferPointer
    /// What follows `head`; often empty.
    var body: UnsafeRawBufferPointer

    /// A frame in one buffer.
    init(_ bytes: UnsafeRawBufferPointer) {
        head = bytes
        body = UnsafeRawBufferPointer(start: nil, count: 0)
    }

    /// A frame in two parts.
    init(head: UnsafeRawBufferPointer, body: UnsafeRawBufferPointer) {
        self.head = head
        self.body = body
    }

    /// The frame's length.
    var count: Int { head.count + body.count }

    /// The bytes from `offset` on.
    func dropping(_ offset: Int) -> FrameBytes {
        guard offset > 0 else { return self }
        if offset >= head.count {
            return FrameBytes(UnsafeRawBufferPointer(rebasing: body[(offset - head.count)...]))
        }
        return FrameBytes(head: UnsafeRawBufferPointer(rebasing: head[offset...]), body: body)
    }

    /// The bytes in one array (what a queued write keeps).
    func joined() -> [UInt8] {
        var bytes = [UInt8]()
        bytes.reserveCapacity(count)
        bytes.append(contentsOf: head)
        bytes.append(contentsOf: body)
        return bytes
    }
}
