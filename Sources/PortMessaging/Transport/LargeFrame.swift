import Glibc
import PortKitSystem

/// A frame too large to pass through the read buffer, read into storage its header sizes.
///
/// Once its first bytes are in, a large frame's first component (the bulk of any large
/// message: `Message(id:bytes:)` is one bytes component) is read straight into the array
/// the message will hold: allocated once from its length, filled by the reads themselves,
/// never copied. The rest of the frame (its header, the first component's header, and
/// whatever follows that payload) is kept beside it and decoded by the codec as a frame
/// whose first payload is empty; the payload is then put in its place. A frame whose first
/// component is not a large bytes component is read whole into one array sized from its
/// header.
///
/// The payload's array is taken from the allocator uninitialized: a peer that announces a
/// frame and sends nothing more costs address space, not memory (the pages are the
/// kernel's until a read fills them), and no more than one frame at a time per connection,
/// within the port's limit.
struct LargeFrame {
    /// Frames at least this long, not complete in the read that began them, are read here.
    static let threshold = 64 * 1024

    /// The frame's header, parsed from its first bytes.
    let header: WireHeader
    /// The frame's bytes outside `payload`: with a payload, its first `prefixSize` bytes
    /// and then what follows the payload; without, the whole frame.
    private var outside: [UInt8]
    /// The first component's payload, read in place; its length when there is one.
    private var payload: [UInt8]
    private var payloadLength: Int?
    /// The first component is not a large bytes component: the frame is read whole.
    private var readsWhole = false
    /// Bytes of the frame received so far.
    private(set) var received = 0

    /// The header and the first component's header: what must be in before the payload's
    /// length is known.
    private static let prefixSize = WireLayout.headerSize + WireLayout.componentHeaderSize
    /// The most one read of a frame read whole takes (its room is zeroed first).
    private static let wholeReadRoom = 256 * 1024

    /// A frame whose `header` was parsed from `bytes`, the first bytes of the frame read
    /// (all of them, up to the frame's end at most).
    init(header: WireHeader, first bytes: UnsafeRawBufferPointer) {
        self.header = header
        outside = []
        outside.reserveCapacity(Self.prefixSize)
        payload = []
        let prefix = min(bytes.count, Self.prefixSize)
        outside.append(contentsOf: bytes[..<prefix])
        received = prefix
        if received == Self.prefixSize { choose() }
        if prefix < bytes.count { take(UnsafeRawBufferPointer(rebasing: bytes[prefix...])) }
    }

    /// Whether every byte of the frame is in.
    var isComplete: Bool { received == header.frameLength }

    /// One read into the frame's next missing bytes (never past its end), with `read`
    /// doing the reading into the room it is given: its result, whose count was taken in.
    mutating func read(_ read: (UnsafeMutableRawBufferPointer) -> Result<Int, Errno>) -> Result<Int, Errno> {
        if let length = payloadLength, received < Self.prefixSize + length {
            // Straight into the payload's array.
            let filled = received - Self.prefixSize
            let result = payload.withUnsafeMutableBytes { raw in
                read(UnsafeMutableRawBufferPointer(rebasing: raw[filled..<length]))
            }
            if case .success(let count) = result { received += count }
            return result
        }
        // The rest of the prefix, what follows the payload, or a frame read whole: into
        // `outside`, at its end.
        let missing = header.frameLength - received
        let room = received < Self.prefixSize ? Self.prefixSize - received : min(missing, Self.wholeReadRoom)
        let start = outside.count
        outside.append(contentsOf: repeatElement(0, count: room))
        let result = outside.withUnsafeMutableBytes { raw in read(UnsafeMutableRawBufferPointer(rebasing: raw[start...])) }
        let count = (try? result.get()) ?? 0
        outside.removeLast(room - count)
        received += count
        if received == Self.prefixSize && payloadLength == nil && !readsWhole { choose() }
        return result
    }

    /// The frame, once complete: the bytes to decode (with the first payload cut out and
    /// its length field set to 0) and the payload to put back as the first component.
    consuming func parts() -> (frame: [UInt8], firstPayload: [UInt8]?) {
        guard payloadLength != nil else { return (outside, nil) }
        var frame = outside
        let length = UInt32(frame.count)
        frame.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: length.littleEndian, toByteOffset: WireLayout.lengthOffset, as: UInt32.self)
            raw.storeBytes(of: UInt32(0).littleEndian, toByteOffset: WireLayout.headerSize + 1, as: UInt32.self)
        }
        return (frame, payload)
    }

    /// With the prefix in: a first component that is bytes and large gets its array, to
    /// be read into; any other frame is read whole into `outside`.
    private mutating func choose() {
        let (tag, length) = outside.withUnsafeBytes { raw in
            (raw[WireLayout.headerSize], Int(clamping: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: WireLayout.headerSize + 1, as: UInt32.self))))
        }
        guard header.componentCount > 0, tag == WireLayout.bytesTag, length >= Self.threshold / 2,
              length <= header.frameLength - Self.prefixSize
        else {
            readsWhole = true
            outside.reserveCapacity(header.frameLength)
            return
        }
        // The array claims its bytes before any is written: each is written by a read (or
        // by `take`) before the message can see it.
        payload = [UInt8](unsafeUninitializedCapacity: length) { _, count in count = length }
        payloadLength = length
    }

    /// Takes bytes of the frame that came with its first read, after the prefix.
    private mutating func take(_ bytes: UnsafeRawBufferPointer) {
        var rest = bytes
        if let length = payloadLength {
            let intoPayload = min(rest.count, length)
            payload.withUnsafeMutableBytes { raw in
                raw.baseAddress!.copyMemory(from: rest.baseAddress!, byteCount: intoPayload)
            }
            rest = UnsafeRawBufferPointer(rebasing: rest[intoPayload...])
        }
        outside.append(contentsOf: rest)
        received += bytes.count
    }
}
