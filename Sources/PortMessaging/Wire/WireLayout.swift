// The fixed numbers of wire format version 1, in one place, so the encoder, the
// decoder, the stream splitter and docs/WIRE.md cannot drift apart.
// This folder imports nothing: it is a pure function of bytes and compiles alone
// (`swiftc -package-name PortKit Sources/PortMessaging/Wire/*.swift`) for the fuzzer.

/// Byte offsets, sizes and constants of the version 1 frame layout (see docs/WIRE.md).
package enum WireLayout {
    /// The four bytes every frame starts with, "PKWF" (PortKit Wire Frame: 50 4B 57 46),
    /// as the little-endian 32-bit value they read as.
    package static let magic: UInt32 = 0x4657_4B50
    /// The only version this decoder reads and this encoder writes.
    package static let version: UInt8 = 1
    /// Size of the fixed header that precedes the components.
    package static let headerSize = 32
    /// Size of a component's own header: a tag byte and a 32-bit value.
    package static let componentHeaderSize = 5
    /// The reply-port field's value when the message has no reply port.
    package static let noReplyPort: UInt16 = 0xFFFF

    // Header field offsets. Magic, version and length keep these offsets in every
    // future version, so any reader can delimit a frame before it knows the version.
    package static let magicOffset = 0
    package static let versionOffset = 4
    package static let kindOffset = 5
    package static let flagsOffset = 6
    package static let lengthOffset = 8
    package static let idOffset = 12
    package static let sequenceOffset = 16
    package static let componentCountOffset = 24
    package static let descriptorCountOffset = 26
    package static let replyPortOffset = 28
    package static let reservedOffset = 30

    // Component tags.
    package static let bytesTag: UInt8 = 0
    package static let portTag: UInt8 = 1
    package static let descriptorTag: UInt8 = 2

    /// The largest frame length the 32-bit length field can state (clamped, so that
    /// 32-bit platforms get Int.max instead of a trap; likewise for every UInt32 read).
    package static let maxRepresentableFrame = Int(clamping: UInt32.max)
    /// The largest component or descriptor count the 16-bit count fields can state.
    package static let maxRepresentableCount = Int(UInt16.max)
}

// Little-endian access to raw bytes. Callers check bounds first: these never look at
// input they have not already proved long enough, and unaligned loads are deliberate
// because fields sit wherever the previous component ended.
extension UnsafeRawBufferPointer {
    @inline(__always)
    func wireLoad<T: FixedWidthInteger>(_: T.Type, at offset: Int) -> T {
        T(littleEndian: loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

extension UnsafeMutableRawBufferPointer {
    @inline(__always)
    func wireStore<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        storeBytes(of: value.littleEndian, toByteOffset: offset, as: T.self)
    }
}
