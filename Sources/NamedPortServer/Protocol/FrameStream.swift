import Glibc
import PortMessaging

/// How a stream of frames ended.
enum StreamEnd: Error, Sendable {
    /// The peer closed its end (a read returned 0).
    case closed
    /// A read failed (`ECONNRESET`, …).
    case failed(Errno)
    /// The peer sent something that is not a frame stream of this protocol.
    case malformed(String)
}

/// Reads frames, and the descriptors sent with them, from a non-blocking SOCK_STREAM socket.
///
/// On a stream socket SCM_RIGHTS descriptors arrive with the first byte of the `sendmsg`
/// that carried them, so they are queued in arrival order and each frame, once whole,
/// takes as many from the front as its header announces (docs/WIRE.md, stream framing).
struct FrameReader {
    private var splitter: WireFrameSplitter
    /// Received descriptors no frame has claimed yet; owned here until claimed.
    private var unclaimed: [CInt] = []
    private var buffer: [UInt8]

    /// A reader refusing frames past `limits` at their header; reading `readSize` bytes
    /// at a time.
    init(limits: WireLimits = .default, readSize: Int = 16 * 1024) {
        splitter = WireFrameSplitter(limits: limits)
        buffer = [UInt8](repeating: 0, count: readSize)
    }

    /// Bytes received and kept for a frame not yet whole.
    var bufferedByteCount: Int { splitter.bufferedByteCount }

    /// Descriptors one read can take. A stream `recvmsg` returns the descriptors of one
    /// `sendmsg` at most, and the name protocol sends at most one per frame, a frame per
    /// `sendmsg` (clients send none): more means a peer that does not speak it, and the
    /// kernel's MSG_CTRUNC ends the stream as malformed. Small, because the space for them is
    /// made on every read.
    static let maxDescriptorsPerRead = 4

    /// Reads what the socket holds, up to `budget` reads (the loop is level-triggered and
    /// calls again), and returns the whole frames, in order, and how the stream ended if
    /// it did. Frames before an end are still returned; their descriptors are theirs.
    mutating func read(from socket: FileDescriptor, budget: Int = 16) -> (frames: [IncomingFrame], end: StreamEnd?) {
        var frames: [IncomingFrame] = []
        for _ in 0..<budget {
            let outcome = buffer.withUnsafeMutableBytes { raw in
                Result { () throws(Errno) in try socket.receive(into: raw, maxDescriptors: Self.maxDescriptorsPerRead) }
            }
            let received: FileDescriptor.Received
            switch outcome {
            case .success(let value): received = value
            case .failure(let error) where error == .wouldBlock: return (frames, nil)
            case .failure(let error): return (frames, .failed(error))
            }
            unclaimed += received.descriptors
            if received.truncated {
                return (frames, .malformed("descriptors were dropped by the kernel (MSG_CTRUNC)"))
            }
            if received.count == 0 {
                if let end = takeFrames(into: &frames) { return (frames, end) }
                if splitter.bufferedByteCount > 0 { return (frames, .malformed("the stream ended inside a frame")) }
                return (frames, .closed)
            }
            buffer.withUnsafeBytes { raw in splitter.append(UnsafeRawBufferPointer(rebasing: raw[..<received.count])) }
            if let end = takeFrames(into: &frames) { return (frames, end) }
            // A short read that completed every frame means the socket is (very likely)
            // drained; the loop, or the next poll, says so if it is not.
            if received.count < buffer.count && splitter.bufferedByteCount == 0 { break }
        }
        return (frames, nil)
    }

    /// Moves every whole frame out of the splitter into `frames`.
    private mutating func takeFrames(into frames: inout [IncomingFrame]) -> StreamEnd? {
        while true {
            let bytes: [UInt8]
            do {
                guard let next = try splitter.nextFrame() else { return nil }
                bytes = next
            } catch {
                return .malformed("\(error)")
            }
            let limits = splitter.limits
            let header = bytes.withUnsafeBytes { raw in try? WireHeader.parse(raw, limits: limits) }
            guard let header = header ?? nil else { return .malformed("a frame header the splitter accepted failed to parse") }
            guard header.descriptorCount <= unclaimed.count else {
                return .malformed("a frame announces \(header.descriptorCount) descriptors, \(unclaimed.count) arrived")
            }
            let descriptors = Array(unclaimed.prefix(header.descriptorCount))
            unclaimed.removeFirst(header.descriptorCount)
            do {
                let message = try WireCodec.decode(bytes, descriptorCount: descriptors.count, limits: limits)
                frames.append(IncomingFrame(message: message, descriptors: descriptors))
            } catch {
                closeDescriptors(descriptors)
                return .malformed("\(error)")
            }
        }
    }

    /// Whether more descriptors wait unclaimed than the frame still arriving may take
    /// (`perFrame`; none once no frame is partly read): descriptors sent with frames that
    /// announced fewer. A descriptor arrives with the first byte of its frame, so a frame
    /// read in part holds its own until the rest comes.
    func hasStrayDescriptors(perFrame: Int) -> Bool {
        unclaimed.count > (splitter.bufferedByteCount > 0 ? perFrame : 0)
    }

    /// Closes the descriptors no frame claimed; call once the stream is done with.
    mutating func discard() {
        closeDescriptors(unclaimed)
        unclaimed = []
    }
}

/// Frames waiting to be written to a non-blocking socket, written as it takes them.
///
/// A frame's descriptors go with its first byte, in the same `sendmsg`; once that call
/// succeeds the kernel holds its own references, so ours are closed. Frames go out whole
/// and in order: a frame started is finished before the next one begins.
struct FrameQueue {
    private var frames: [OutgoingFrame] = []
    private var head = 0
    /// Bytes of `frames[head]` already written.
    private var offset = 0
    /// Bytes waiting (for the slow-reader limit).
    private(set) var queuedBytes = 0

    /// Whether nothing waits.
    var isEmpty: Bool { head == frames.count }

    /// What a flush achieved.
    enum FlushResult {
        /// Everything is written.
        case drained
        /// The socket is full; wait until it is writable.
        case blocked
        /// The socket is broken (the peer is gone).
        case failed(Errno)
    }

    mutating func append(_ frame: OutgoingFrame) {
        frames.append(frame)
        queuedBytes += frame.bytes.count
    }

    /// Writes as much as the socket takes without blocking.
    mutating func flush(to socket: FileDescriptor) -> FlushResult {
        while head < frames.count {
            let sendDescriptors = offset == 0 ? frames[head].descriptors : []
            let start = offset
            let outcome = frames[head].bytes.withUnsafeBytes { raw in
                Result { () throws(Errno) in
                    try socket.send(UnsafeRawBufferPointer(rebasing: raw[start...]), descriptors: sendDescriptors)
                }
            }
            let sent: Int
            switch outcome {
            case .success(let value): sent = value
            case .failure(let error) where error == .wouldBlock: return .blocked
            case .failure(let error): return .failed(error)
            }
            if !sendDescriptors.isEmpty {
                closeDescriptors(sendDescriptors)
                frames[head].descriptors = []
            }
            offset += sent
            queuedBytes -= sent
            if offset == frames[head].bytes.count {
                frames[head] = OutgoingFrame(bytes: [], descriptors: [])
                head += 1
                offset = 0
            }
        }
        frames.removeAll(keepingCapacity: frames.capacity <= 64)
        head = 0
        return .drained
    }

    /// Drops every waiting frame, closing descriptors that were not sent.
    mutating func discard() {
        for index in head..<frames.count { closeDescriptors(frames[index].descriptors) }
        frames = []
        head = 0
        offset = 0
        queuedBytes = 0
    }
}

/// Closes descriptors this side owns (received ones, or copies already sent).
func closeDescriptors(_ descriptors: [CInt]) {
    for descriptor in descriptors { try? FileDescriptor(rawValue: descriptor).close() }
}
