/// Turns a `WireMessage` into one frame of bytes and back (format: docs/WIRE.md).
///
/// A pure function of its inputs: no I/O, no shared state, no Foundation. Decoding
/// treats its input as hostile: every malformed frame ends in a `WireError`, never a
/// trap, and no length arithmetic can overflow. The encoding is canonical, so a frame
/// that decodes re-encodes to the same bytes.
package enum WireCodec {
    /// Encodes `message` as one frame.
    ///
    /// Runs the same checks the decoder does, so the sender learns about a frame the
    /// receiver would refuse (above all an oversized one) instead of the receiver.
    /// Allocates once: the returned array, sized exactly.
    ///
    /// - Throws: `unknownFlags`, `oversized`, `tooManyComponents`, `tooManyDescriptors`,
    ///   `descriptorIndexOutOfRange`, `descriptorReferencedTwice`, `descriptorUnreferenced`.
    package static func encode(
        _ message: WireMessage, limits: WireLimits = .default
    ) throws(WireError) -> [UInt8] {
        typealias L = WireLayout
        let unknownBits = message.flags.subtracting(.known)
        guard unknownBits.isEmpty else { throw .unknownFlags(unknownBits.rawValue) }

        // Saturating sum: the error should report the size asked for, and no sum of
        // array sizes may wrap around into something that looks small.
        var frameLength = L.headerSize
        var descriptorCount = message.replyPort == nil ? 0 : 1
        for component in message.components {
            var size = L.componentHeaderSize
            switch component {
            case .bytes(let payload): size += payload.count
            case .port, .descriptor: descriptorCount += 1
            }
            let (sum, overflow) = frameLength.addingReportingOverflow(size)
            frameLength = overflow ? Int.max : sum
        }
        guard frameLength <= limits.maxFrameBytes else {
            throw .oversized(length: frameLength, limit: limits.maxFrameBytes)
        }
        guard message.components.count <= limits.maxComponents else {
            throw .tooManyComponents(count: message.components.count, limit: limits.maxComponents)
        }
        guard descriptorCount <= limits.maxDescriptors else {
            throw .tooManyDescriptors(count: descriptorCount, limit: limits.maxDescriptors)
        }
        try DescriptorLedger.with(count: descriptorCount) { (ledger) throws(WireError) in
            if let replyPort = message.replyPort { try ledger.claim(replyPort) }
            for component in message.components {
                switch component {
                case .bytes: break
                case .port(let index), .descriptor(let index): try ledger.claim(index)
                }
            }
            // Unreachable when every claim succeeded (as many references as
            // descriptors, none twice); kept so the invariant is checked where it is stated.
            try ledger.requireAllClaimed()
        }

        let header = WireHeader(
            kind: message.kind,
            flags: message.flags,
            frameLength: frameLength,
            id: message.id,
            sequence: message.sequence,
            componentCount: message.components.count,
            descriptorCount: descriptorCount,
            replyPort: message.replyPort)

        return [UInt8](unsafeUninitializedCapacity: frameLength) { buffer, initializedCount in
            let frame = UnsafeMutableRawBufferPointer(buffer)
            header.write(into: frame)
            var offset = L.headerSize
            for component in message.components {
                switch component {
                case .bytes(let payload):
                    frame[offset] = L.bytesTag
                    frame.wireStore(UInt32(truncatingIfNeeded: payload.count), at: offset + 1)
                    offset += L.componentHeaderSize
                    payload.withUnsafeBytes { source in
                        UnsafeMutableRawBufferPointer(rebasing: frame[offset..<offset + source.count])
                            .copyMemory(from: source)
                    }
                    offset += payload.count
                case .port(let index):
                    frame[offset] = L.portTag
                    frame.wireStore(UInt32(truncatingIfNeeded: index), at: offset + 1)
                    offset += L.componentHeaderSize
                case .descriptor(let index):
                    frame[offset] = L.descriptorTag
                    frame.wireStore(UInt32(truncatingIfNeeded: index), at: offset + 1)
                    offset += L.componentHeaderSize
                }
            }
            initializedCount = offset
        }
    }

    /// Decodes exactly one frame from `bytes`.
    ///
    /// `descriptorCount` is how many descriptors actually arrived beside the frame
    /// (SCM_RIGHTS); it must equal the count the header announces. Checks run in
    /// layout order, so the first thing wrong is the error reported (order in
    /// docs/WIRE.md). Each bytes component is copied once out of `bytes`.
    ///
    /// - Throws: `truncated`, `trailingGarbage`, any header error of
    ///   `WireHeader.parse`, `descriptorCountMismatch`, `garbledComponent`,
    ///   `descriptorIndexOutOfRange`, `descriptorReferencedTwice`, `unusedBodyBytes`,
    ///   `descriptorUnreferenced`.
    package static func decode(
        _ bytes: UnsafeRawBufferPointer, descriptorCount: Int, limits: WireLimits = .default
    ) throws(WireError) -> WireMessage {
        typealias L = WireLayout
        guard let header = try WireHeader.parse(bytes, limits: limits) else {
            throw .truncated(expected: WireHeader.bytesNeeded(bytes), actual: bytes.count)
        }
        let end = header.frameLength
        guard bytes.count >= end else { throw .truncated(expected: end, actual: bytes.count) }
        guard bytes.count == end else { throw .trailingGarbage(count: bytes.count - end) }
        guard descriptorCount == header.descriptorCount else {
            throw .descriptorCountMismatch(expected: header.descriptorCount, actual: descriptorCount)
        }

        return try DescriptorLedger.with(count: header.descriptorCount) {
            (ledger) throws(WireError) -> WireMessage in
            if let replyPort = header.replyPort { try ledger.claim(replyPort) }
            var components: [WireComponent] = []
            // Each component takes at least a component header, so a lying count
            // cannot make this reserve more than the frame could hold.
            components.reserveCapacity(min(header.componentCount, (end - L.headerSize) / L.componentHeaderSize))
            var offset = L.headerSize
            for index in 0..<header.componentCount {
                // offset <= end holds throughout: every advance below was checked
                // against the bytes remaining first.
                let remaining = end - offset
                guard remaining >= L.componentHeaderSize else {
                    throw .garbledComponent(index: index, problem: .headerPastEnd(remaining: remaining))
                }
                let tag = bytes[offset]
                let value = Int(clamping: bytes.wireLoad(UInt32.self, at: offset + 1))
                offset += L.componentHeaderSize
                switch tag {
                case L.bytesTag:
                    let left = end - offset
                    guard value <= left else {
                        throw .garbledComponent(index: index, problem: .payloadPastEnd(length: value, remaining: left))
                    }
                    components.append(.bytes([UInt8](UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + value]))))
                    offset += value
                case L.portTag:
                    try ledger.claim(value)
                    components.append(.port(index: value))
                case L.descriptorTag:
                    try ledger.claim(value)
                    components.append(.descriptor(index: value))
                default:
                    throw .garbledComponent(index: index, problem: .unknownTag(tag))
                }
            }
            guard offset == end else { throw .unusedBodyBytes(count: end - offset) }
            try ledger.requireAllClaimed()
            return WireMessage(
                kind: header.kind,
                flags: header.flags,
                id: header.id,
                sequence: header.sequence,
                replyPort: header.replyPort,
                components: components)
        }
    }

    /// Decodes exactly one frame from an array; see `decode(_:descriptorCount:limits:)`.
    package static func decode(
        _ bytes: [UInt8], descriptorCount: Int, limits: WireLimits = .default
    ) throws(WireError) -> WireMessage {
        // Array.withUnsafeBytes only rethrows untyped errors, so carry the typed
        // error out in a Result.
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(WireError) -> WireMessage in
                try decode(raw, descriptorCount: descriptorCount, limits: limits)
            }
        }
        return try result.get()
    }
}
