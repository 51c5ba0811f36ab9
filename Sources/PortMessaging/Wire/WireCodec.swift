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
                    offset = writeBytesComponent(payload, at: offset, into: frame)
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

    /// The length of the frame `encodeBytesOnly` makes for these payloads (saturating, so
    /// a sum past `Int.max` still reads as oversized).
    package static func bytesOnlyFrameLength<Payloads: Collection<[UInt8]>>(_ payloads: Payloads) -> Int {
        var frameLength = WireLayout.headerSize
        for payload in payloads {
            let (sum, overflow) = frameLength.addingReportingOverflow(WireLayout.componentHeaderSize + payload.count)
            frameLength = overflow ? Int.max : sum
        }
        return frameLength
    }

    /// Encodes a message whose components are all bytes and which carries no descriptors
    /// (no ports, no reply port) into the start of `buffer`: the very bytes `encode` makes
    /// for the same message, without building a `WireMessage` or an array for the frame,
    /// so a sender can encode into memory it reuses or has on its stack.
    ///
    /// - Returns: the frame's length.
    /// - Throws: `oversized`, `tooManyComponents` (as `encode`); the frame must fit
    ///   `buffer` (at least `bytesOnlyFrameLength(payloads)` bytes), which is a
    ///   precondition, not an error.
    package static func encodeBytesOnly<Payloads: Collection<[UInt8]>>(
        kind: WireKind, id: UInt32, sequence: UInt64, payloads: Payloads,
        into buffer: UnsafeMutableRawBufferPointer, limits: WireLimits = .default
    ) throws(WireError) -> Int {
        let frameLength = bytesOnlyFrameLength(payloads)
        guard frameLength <= limits.maxFrameBytes else {
            throw .oversized(length: frameLength, limit: limits.maxFrameBytes)
        }
        try writeBytesOnlyHeader(
            kind: kind, id: id, sequence: sequence, frameLength: frameLength,
            componentCount: payloads.count, into: buffer, limits: limits)
        var offset = WireLayout.headerSize
        for payload in payloads { offset = writeBytesComponent(payload, at: offset, into: buffer) }
        return offset
    }

    /// Checks the component count of a frame without descriptors and writes its header at
    /// the start of `buffer`, which must hold `frameLength` bytes, or `written` when the
    /// caller writes only that much of the frame there (a precondition).
    private static func writeBytesOnlyHeader(
        kind: WireKind, id: UInt32, sequence: UInt64, frameLength: Int, componentCount: Int,
        into buffer: UnsafeMutableRawBufferPointer, limits: WireLimits, written: Int? = nil
    ) throws(WireError) {
        guard componentCount <= limits.maxComponents else {
            throw .tooManyComponents(count: componentCount, limit: limits.maxComponents)
        }
        precondition(buffer.count >= (written ?? frameLength), "the buffer is smaller than the frame")
        let header = WireHeader(
            kind: kind, flags: [], frameLength: frameLength, id: id, sequence: sequence,
            componentCount: componentCount, descriptorCount: 0, replyPort: nil)
        header.write(into: buffer)
    }

    /// Encodes a message of at most one bytes component (`payload`; `nil`: no component)
    /// and no descriptors into the start of `buffer`: the very bytes `encode` makes for it.
    /// The usual message has exactly this shape; this path touches no array at all.
    ///
    /// - Returns: the frame's length.
    /// - Throws: `oversized`, `tooManyComponents` (as `encode`); the frame must fit
    ///   `buffer` (`WireLayout.headerSize`, plus the component header and payload if
    ///   any), which is a precondition, not an error.
    package static func encodeSingleBytes(
        kind: WireKind, id: UInt32, sequence: UInt64, payload: UnsafeRawBufferPointer?,
        into buffer: UnsafeMutableRawBufferPointer, limits: WireLimits = .default
    ) throws(WireError) -> Int {
        precondition(buffer.count >= WireLayout.headerSize + (payload.map { WireLayout.componentHeaderSize + $0.count } ?? 0),
                     "the buffer is smaller than the frame")
        let frameLength = try encodeSingleBytesHead(
            kind: kind, id: id, sequence: sequence, payloadCount: payload?.count, into: buffer, limits: limits)
        if let payload, let base = payload.baseAddress, !payload.isEmpty {
            (buffer.baseAddress! + WireLayout.headerSize + WireLayout.componentHeaderSize).copyMemory(from: base, byteCount: payload.count)
        }
        return frameLength
    }

    /// Encodes what precedes the payload of a message of at most one bytes component of
    /// `payloadCount` bytes (`nil`: no component) into the start of `buffer`: the header and
    /// the component's header, which the payload then follows as it is (a writer gathers the
    /// two, copying nothing).
    ///
    /// - Returns: the whole frame's length (payload included).
    /// - Throws: as `encodeSingleBytes`; `buffer` must hold the header and the component's
    ///   header.
    package static func encodeSingleBytesHead(
        kind: WireKind, id: UInt32, sequence: UInt64, payloadCount: Int?,
        into buffer: UnsafeMutableRawBufferPointer, limits: WireLimits = .default
    ) throws(WireError) -> Int {
        typealias L = WireLayout
        let componentCount = payloadCount == nil ? 0 : 1
        let (frameLength, overflow) = L.headerSize.addingReportingOverflow(payloadCount.map { L.componentHeaderSize + $0 } ?? 0)
        guard !overflow, frameLength <= limits.maxFrameBytes else {
            throw .oversized(length: overflow ? Int.max : frameLength, limit: limits.maxFrameBytes)
        }
        try writeBytesOnlyHeader(
            kind: kind, id: id, sequence: sequence, frameLength: frameLength,
            componentCount: componentCount, into: buffer, limits: limits,
            written: L.headerSize + (payloadCount == nil ? 0 : L.componentHeaderSize))
        guard let payloadCount else { return frameLength }
        buffer[L.headerSize] = L.bytesTag
        buffer.wireStore(UInt32(truncatingIfNeeded: payloadCount), at: L.headerSize + 1)
        return frameLength
    }

    /// Writes a bytes component (tag, length, payload) at `offset`; returns the offset
    /// after it. The caller has sized `frame`.
    @inline(__always)
    private static func writeBytesComponent(_ payload: [UInt8], at offset: Int, into frame: UnsafeMutableRawBufferPointer) -> Int {
        typealias L = WireLayout
        frame[offset] = L.bytesTag
        frame.wireStore(UInt32(truncatingIfNeeded: payload.count), at: offset + 1)
        let start = offset + L.componentHeaderSize
        payload.withUnsafeBytes { source in
            guard let base = source.baseAddress, !source.isEmpty else { return }
            (frame.baseAddress! + start).copyMemory(from: base, byteCount: source.count)
        }
        return start + payload.count
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
        guard let header = try WireHeader.parse(bytes, limits: limits) else {
            throw .truncated(expected: WireHeader.bytesNeeded(bytes), actual: bytes.count)
        }
        return try decode(bytes, header: header, descriptorCount: descriptorCount)
    }

    /// Decodes exactly one frame from `bytes` whose header a stream reader has already
    /// parsed (with `WireHeader.parse`, from these same bytes): the rest of
    /// `decode(_:descriptorCount:limits:)`, without reading the header a second time.
    ///
    /// - Throws: as `decode(_:descriptorCount:limits:)`, less the header errors.
    package static func decode(
        _ bytes: UnsafeRawBufferPointer, header: WireHeader, descriptorCount: Int
    ) throws(WireError) -> WireMessage {
        let components = try decodeComponents(bytes, header: header, descriptorCount: descriptorCount) { $0 }
        return WireMessage(
            kind: header.kind,
            flags: header.flags,
            id: header.id,
            sequence: header.sequence,
            replyPort: header.replyPort,
            components: components)
    }

    /// The body half of `decode(_:header:descriptorCount:)`: checks the frame and returns
    /// its components, each passed through `make` as it is read, so a transport can build
    /// its own component values without an intermediate array. The header fields are the
    /// rest of the message.
    ///
    /// - Throws: as `decode(_:header:descriptorCount:)`.
    @inline(__always)
    package static func decodeComponents<Component>(
        _ bytes: UnsafeRawBufferPointer, header: WireHeader, descriptorCount: Int,
        _ make: (WireComponent) -> Component
    ) throws(WireError) -> [Component] {
        typealias L = WireLayout
        let end = header.frameLength
        guard bytes.count >= end else { throw .truncated(expected: end, actual: bytes.count) }
        guard bytes.count == end else { throw .trailingGarbage(count: bytes.count - end) }
        guard descriptorCount == header.descriptorCount else {
            throw .descriptorCountMismatch(expected: header.descriptorCount, actual: descriptorCount)
        }

        return try DescriptorLedger.with(count: header.descriptorCount) {
            (ledger) throws(WireError) -> [Component] in
            if let replyPort = header.replyPort { try ledger.claim(replyPort) }
            var components: [Component] = []
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
                    components.append(make(.bytes([UInt8](UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + value])))))
                    offset += value
                case L.portTag:
                    try ledger.claim(value)
                    components.append(make(.port(index: value)))
                case L.descriptorTag:
                    try ledger.claim(value)
                    components.append(make(.descriptor(index: value)))
                default:
                    throw .garbledComponent(index: index, problem: .unknownTag(tag))
                }
            }
            guard offset == end else { throw .unusedBodyBytes(count: end - offset) }
            try ledger.requireAllClaimed()
            return components
        }
    }

    /// The payload of a frame that is exactly one bytes component, without descriptors or
    /// a reply port (the usual message), held to the checks `decodeComponents` makes of
    /// such a frame; `nil` for every other frame, a malformed one included, which
    /// `decodeComponents` then decodes or reports. Lets a transport make the message's one
    /// component without an array of components.
    @inline(__always)
    package static func singleBytesPayload(_ bytes: UnsafeRawBufferPointer, header: WireHeader) -> UnsafeRawBufferPointer? {
        typealias L = WireLayout
        let end = header.frameLength
        let start = L.headerSize + L.componentHeaderSize
        guard header.componentCount == 1, header.descriptorCount == 0, header.replyPort == nil,
            bytes.count == end, end >= start, bytes[L.headerSize] == L.bytesTag,
            Int(clamping: bytes.wireLoad(UInt32.self, at: L.headerSize + 1)) == end - start
        else { return nil }
        return UnsafeRawBufferPointer(rebasing: bytes[start..<end])
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
