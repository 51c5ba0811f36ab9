/// The fixed 32-byte header at the start of every frame (layout in docs/WIRE.md).
///
/// Stream transports read it to learn a frame's length and how many descriptors go
/// with it before the body has arrived.
package struct WireHeader: Hashable, Sendable {
    /// What the frame is for.
    package var kind: WireKind
    /// Flag bits (a subset of `WireFlags.known` once validated).
    package var flags: WireFlags
    /// The whole frame's length, header included.
    package var frameLength: Int
    /// The application's message id.
    package var id: UInt32
    /// Request/reply matching number.
    package var sequence: UInt64
    /// Number of components in the body.
    package var componentCount: Int
    /// Number of SCM_RIGHTS descriptors that travel beside the frame.
    package var descriptorCount: Int
    /// Descriptor index of the reply port, if any.
    package var replyPort: Int?

    /// Reads and validates the header at the start of `prefix`, which may hold only
    /// part of it (a stream reader calls this as bytes arrive).
    ///
    /// Fields are checked in layout order as far as the bytes go, so a bad magic or an
    /// oversized length is reported as soon as those bytes are present, before any body
    /// is buffered. Bytes after the header are not looked at.
    ///
    /// - Returns: the header, or `nil` if `prefix` ends before the header does and
    ///   nothing seen so far is wrong.
    /// - Throws: `badMagic`, `unsupportedVersion`, `unknownKind`, `unknownFlags`,
    ///   `invalidLength`, `oversized`, `tooManyComponents`, `tooManyDescriptors`,
    ///   `descriptorIndexOutOfRange` (reply port), `reservedNotZero`.
    package static func parse(
        _ prefix: UnsafeRawBufferPointer, limits: WireLimits
    ) throws(WireError) -> WireHeader? {
        typealias L = WireLayout
        let available = prefix.count
        // Byte by byte, so a stream of garbage is refused from its first byte on; a whole
        // magic (the usual case) is checked in one load.
        if available < 4 || prefix.wireLoad(UInt32.self, at: L.magicOffset) != L.magic {
            for offset in 0..<min(available, 4)
            where prefix[L.magicOffset + offset] != UInt8(truncatingIfNeeded: L.magic >> (8 * offset)) {
                throw .badMagic
            }
        }

        guard available > L.versionOffset else { return nil }
        let version = prefix[L.versionOffset]
        guard version == L.version else { throw .unsupportedVersion(version) }

        guard available > L.kindOffset else { return nil }
        let rawKind = prefix[L.kindOffset]
        guard let kind = WireKind(rawValue: rawKind) else { throw .unknownKind(rawKind) }

        guard available >= L.flagsOffset + 2 else { return nil }
        let flags = WireFlags(rawValue: prefix.wireLoad(UInt16.self, at: L.flagsOffset))
        let unknownBits = flags.subtracting(.known)
        guard unknownBits.isEmpty else { throw .unknownFlags(unknownBits.rawValue) }

        guard available >= L.lengthOffset + 4 else { return nil }
        let frameLength = Int(clamping: prefix.wireLoad(UInt32.self, at: L.lengthOffset))
        guard frameLength >= L.headerSize else { throw .invalidLength(frameLength) }
        guard frameLength <= limits.maxFrameBytes else {
            throw .oversized(length: frameLength, limit: limits.maxFrameBytes)
        }

        guard available >= L.componentCountOffset + 2 else { return nil }
        let componentCount = Int(prefix.wireLoad(UInt16.self, at: L.componentCountOffset))
        guard componentCount <= limits.maxComponents else {
            throw .tooManyComponents(count: componentCount, limit: limits.maxComponents)
        }

        guard available >= L.descriptorCountOffset + 2 else { return nil }
        let descriptorCount = Int(prefix.wireLoad(UInt16.self, at: L.descriptorCountOffset))
        guard descriptorCount <= limits.maxDescriptors else {
            throw .tooManyDescriptors(count: descriptorCount, limit: limits.maxDescriptors)
        }

        guard available >= L.replyPortOffset + 2 else { return nil }
        let rawReply = prefix.wireLoad(UInt16.self, at: L.replyPortOffset)
        var replyPort: Int? = nil
        if rawReply != L.noReplyPort {
            guard Int(rawReply) < descriptorCount else {
                throw .descriptorIndexOutOfRange(index: Int(rawReply), count: descriptorCount)
            }
            replyPort = Int(rawReply)
        }

        guard available >= L.reservedOffset + 2 else { return nil }
        let reserved = prefix.wireLoad(UInt16.self, at: L.reservedOffset)
        guard reserved == 0 else { throw .reservedNotZero(reserved) }

        return WireHeader(
            kind: kind,
            flags: flags,
            frameLength: frameLength,
            id: prefix.wireLoad(UInt32.self, at: L.idOffset),
            sequence: prefix.wireLoad(UInt64.self, at: L.sequenceOffset),
            componentCount: componentCount,
            descriptorCount: descriptorCount,
            replyPort: replyPort)
    }

    /// The smallest byte count that could complete the frame starting at `prefix`, as
    /// far as its bytes tell: the stated length once the length field is readable, the
    /// header size before. Meant for a prefix `parse` has accepted.
    package static func bytesNeeded(_ prefix: UnsafeRawBufferPointer) -> Int {
        guard prefix.count >= WireLayout.lengthOffset + 4 else { return WireLayout.headerSize }
        return max(WireLayout.headerSize, Int(clamping: prefix.wireLoad(UInt32.self, at: WireLayout.lengthOffset)))
    }

    /// Writes the header into the first `WireLayout.headerSize` bytes of `buffer`.
    /// The caller has validated every field and sized the buffer.
    func write(into buffer: UnsafeMutableRawBufferPointer) {
        typealias L = WireLayout
        buffer.wireStore(L.magic, at: L.magicOffset)
        buffer[L.versionOffset] = L.version
        buffer[L.kindOffset] = kind.rawValue
        buffer.wireStore(flags.rawValue, at: L.flagsOffset)
        buffer.wireStore(UInt32(truncatingIfNeeded: frameLength), at: L.lengthOffset)
        buffer.wireStore(id, at: L.idOffset)
        buffer.wireStore(sequence, at: L.sequenceOffset)
        buffer.wireStore(UInt16(truncatingIfNeeded: componentCount), at: L.componentCountOffset)
        buffer.wireStore(UInt16(truncatingIfNeeded: descriptorCount), at: L.descriptorCountOffset)
        buffer.wireStore(replyPort.map { UInt16(truncatingIfNeeded: $0) } ?? L.noReplyPort, at: L.replyPortOffset)
        buffer.wireStore(UInt16(0), at: L.reservedOffset)
    }
}
