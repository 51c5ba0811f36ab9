import Testing
@testable import PortMessaging

// Bad frames are written out byte by byte here rather than made by the encoder, so a
// bug shared by encoder and decoder cannot hide itself.

private func le<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
    (0..<T.bitWidth / 8).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) }
}

/// A raw header with every field settable, valid by default.
private func rawHeader(
    magic: [UInt8] = Array("PKWF".utf8), version: UInt8 = 1, kind: UInt8 = 0, flags: UInt16 = 0,
    length: UInt32, id: UInt32 = 0, sequence: UInt64 = 0, components: UInt16 = 0,
    descriptors: UInt16 = 0, reply: UInt16 = 0xFFFF, reserved: UInt16 = 0
) -> [UInt8] {
    magic + [version, kind] + le(flags) + le(length) + le(id) + le(sequence)
        + le(components) + le(descriptors) + le(reply) + le(reserved)
}

private func rawBytes(_ payload: [UInt8]) -> [UInt8] { [0] + le(UInt32(payload.count)) + payload }
private func rawPort(_ index: UInt32) -> [UInt8] { [1] + le(index) }
private func rawDescriptor(_ index: UInt32) -> [UInt8] { [2] + le(index) }

/// The worked example of docs/WIRE.md: a request with a reply port, "hi" and a descriptor.
private let exampleMessage = WireMessage(
    kind: .request, id: 7, sequence: 1, replyPort: 0,
    components: [.bytes(Array("hi".utf8)), .descriptor(index: 1)])
private let exampleFrame: [UInt8] = [
    0x50, 0x4B, 0x57, 0x46, 0x01, 0x01, 0x00, 0x00, 0x2C, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x02, 0x00, 0x00, 0x00, 0x68, 0x69, 0x02, 0x01, 0x00, 0x00, 0x00,
]

private func decode(_ bytes: [UInt8], descriptors: Int = 0, limits: WireLimits = .default) throws(WireError) -> WireMessage {
    try WireCodec.decode(bytes, descriptorCount: descriptors, limits: limits)
}

private func decodeError(_ bytes: [UInt8], descriptors: Int = 0, limits: WireLimits = .default) -> WireError? {
    do {
        _ = try decode(bytes, descriptors: descriptors, limits: limits)
        return nil
    } catch {
        return error
    }
}

private func encodeError(_ message: WireMessage, limits: WireLimits = .default) -> WireError? {
    do {
        _ = try WireCodec.encode(message, limits: limits)
        return nil
    } catch {
        return error
    }
}

// MARK: - Round trips

@Test func workedExampleMatchesTheSpec() throws {
    #expect(try WireCodec.encode(exampleMessage) == exampleFrame)
    #expect(try decode(exampleFrame, descriptors: 2) == exampleMessage)
}

private let roundTripMessages: [(String, WireMessage)] = [
    ("no components", WireMessage(id: 0)),
    ("empty bytes", WireMessage(id: 1, components: [.bytes([])])),
    ("one byte", WireMessage(id: 2, components: [.bytes([0xAB])])),
    ("request", WireMessage(kind: .request, id: .max, sequence: .max, replyPort: 0, components: [.bytes([1, 2, 3])])),
    ("reply", WireMessage(kind: .reply, id: 9, sequence: 12345)),
    ("check-in", WireMessage(kind: .checkIn, id: 3, replyPort: 0)),
    ("ports and descriptors out of order", WireMessage(
        id: 4, replyPort: 2,
        components: [.descriptor(index: 1), .bytes([7]), .port(index: 0), .port(index: 3)])),
    ("many components", WireMessage(
        id: 5, replyPort: 249,
        components: (0..<1024).map { i in
            i < 249 ? (i.isMultiple(of: 2) ? .port(index: i) : .descriptor(index: i)) : .bytes(Array(repeating: UInt8(i & 0xFF), count: i % 7))
        })),
]

@Test(arguments: roundTripMessages.indices)
func roundTrip(_ index: Int) throws {
    let message = roundTripMessages[index].1
    let frame = try WireCodec.encode(message)
    #expect(frame.count == WireLayout.headerSize + message.components.reduce(0) { sum, component in
        if case .bytes(let payload) = component { return sum + 5 + payload.count }
        return sum + 5
    })
    #expect(try decode(frame, descriptors: message.descriptorCount) == message, "\(roundTripMessages[index].0)")
}

@Test func maxSizeRoundTripAndOneByteMoreIsRefused() throws {
    let limits = WireLimits.default
    #expect(limits.maxFrameBytes == 16 * 1024 * 1024 + 32)
    let payloadSize = limits.maxFrameBytes - WireLayout.headerSize - WireLayout.componentHeaderSize
    var message = WireMessage(id: 1, components: [.bytes(Array(repeating: 0x5A, count: payloadSize))])
    let frame = try WireCodec.encode(message, limits: limits)
    #expect(frame.count == limits.maxFrameBytes)
    let decoded = try decode(frame, limits: limits)
    #expect(decoded == message)

    message.components = [.bytes(Array(repeating: 0x5A, count: payloadSize + 1))]
    #expect(encodeError(message, limits: limits) == .oversized(length: limits.maxFrameBytes + 1, limit: limits.maxFrameBytes))
}

@Test func limitsAreConfigurableAndClampedToTheFormat() throws {
    let small = WireLimits(maxFrameBytes: 64, maxComponents: 2, maxDescriptors: 1)
    let fits = WireMessage(id: 1, components: [.bytes(Array(repeating: 1, count: 27))])
    #expect(try WireCodec.encode(fits, limits: small).count == 64)
    #expect(encodeError(WireMessage(id: 1, components: [.bytes(Array(repeating: 1, count: 28))]), limits: small)
        == .oversized(length: 65, limit: 64))

    var clamped = WireLimits(maxFrameBytes: 1, maxComponents: -5, maxDescriptors: 1 << 40)
    #expect(clamped.maxFrameBytes == WireLayout.headerSize)
    #expect(clamped.maxComponents == 0)
    #expect(clamped.maxDescriptors == Int(UInt16.max))
    clamped.maxFrameBytes = Int.max
    #expect(clamped.maxFrameBytes == Int(UInt32.max))
}

// MARK: - Encode refuses what the decoder would refuse

private let refusedMessages: [(String, WireMessage, WireError)] = [
    ("too many components", WireMessage(id: 1, components: Array(repeating: .bytes([]), count: 1025)),
     .tooManyComponents(count: 1025, limit: 1024)),
    ("too many descriptors", WireMessage(id: 1, components: (0..<251).map { .port(index: $0) }),
     .tooManyDescriptors(count: 251, limit: 250)),
    ("index past the array", WireMessage(id: 1, components: [.port(index: 1)]),
     .descriptorIndexOutOfRange(index: 1, count: 1)),
    ("negative index", WireMessage(id: 1, components: [.descriptor(index: -1)]),
     .descriptorIndexOutOfRange(index: -1, count: 1)),
    ("index used twice", WireMessage(id: 1, replyPort: 0, components: [.port(index: 0)]),
     .descriptorReferencedTwice(index: 0)),
    ("unknown flags", WireMessage(flags: WireFlags(rawValue: 0x8001), id: 1), .unknownFlags(0x8001)),
]

@Test(arguments: refusedMessages.indices)
func encodeRefuses(_ index: Int) {
    let (name, message, expected) = refusedMessages[index]
    #expect(encodeError(message) == expected, "\(name)")
}

// MARK: - Hand-written bad frames, each with its own error

/// A valid frame to truncate: header, "hello", a port.
private let truncationSubject: [UInt8] =
    rawHeader(length: 32 + 10 + 5, id: 1, components: 2, descriptors: 1) + rawBytes(Array("hello".utf8)) + rawPort(0)

@Test(arguments: 0..<truncationSubject.count)
func truncatedAtEveryByte(_ count: Int) {
    let prefix = Array(truncationSubject.prefix(count))
    // Before the length field is readable only the header size is known to be needed.
    let expected = count < 12 ? 32 : truncationSubject.count
    #expect(decodeError(prefix, descriptors: 1) == .truncated(expected: expected, actual: count))
}

@Test func truncationSubjectIsValid() throws {
    #expect(try decode(truncationSubject, descriptors: 1).components == [.bytes(Array("hello".utf8)), .port(index: 0)])
}

private struct BadFrame: Sendable, CustomTestStringConvertible {
    var name: String
    var bytes: [UInt8]
    var descriptors = 0
    var limits = WireLimits.default
    var error: WireError
    var testDescription: String { name }
}

private let hugeLength = UInt32(WireLimits.default.maxFrameBytes + 1)

private let badFrames: [BadFrame] = [
    BadFrame(name: "bad magic", bytes: rawHeader(magic: Array("PKWX".utf8), length: 32), error: .badMagic),
    BadFrame(name: "bad magic in the first byte alone", bytes: [0x00], error: .badMagic),
    BadFrame(name: "unknown version 2", bytes: rawHeader(version: 2, length: 32), error: .unsupportedVersion(2)),
    BadFrame(name: "version 0", bytes: rawHeader(version: 0, length: 32), error: .unsupportedVersion(0)),
    BadFrame(name: "unknown kind", bytes: rawHeader(kind: 8, length: 32), error: .unknownKind(8)),
    BadFrame(name: "unknown flags", bytes: rawHeader(flags: 0x0104, length: 32), error: .unknownFlags(0x0104)),
    BadFrame(name: "length shorter than the header", bytes: rawHeader(length: 31), error: .invalidLength(31)),
    BadFrame(name: "oversized length, reported before the missing body",
             bytes: rawHeader(length: hugeLength),
             error: .oversized(length: Int(hugeLength), limit: WireLimits.default.maxFrameBytes)),
    BadFrame(name: "oversized under configured limits",
             bytes: rawHeader(length: 32 + 6, components: 1) + rawBytes([1]),
             limits: WireLimits(maxFrameBytes: 37), error: .oversized(length: 38, limit: 37)),
    BadFrame(name: "too many components", bytes: rawHeader(length: 32, components: 1025),
             error: .tooManyComponents(count: 1025, limit: 1024)),
    BadFrame(name: "too many descriptors", bytes: rawHeader(length: 32, descriptors: 251),
             error: .tooManyDescriptors(count: 251, limit: 250)),
    BadFrame(name: "reply port past the descriptors", bytes: rawHeader(length: 32, descriptors: 1, reply: 1),
             descriptors: 1, error: .descriptorIndexOutOfRange(index: 1, count: 1)),
    BadFrame(name: "reserved field set", bytes: rawHeader(length: 32, reserved: 9), error: .reservedNotZero(9)),
    BadFrame(name: "body shorter than the length",
             bytes: rawHeader(length: 40, components: 1) + rawBytes([1]),
             error: .truncated(expected: 40, actual: 38)),
    BadFrame(name: "trailing garbage", bytes: rawHeader(length: 32) + [0xDE, 0xAD, 0xBE],
             error: .trailingGarbage(count: 3)),
    BadFrame(name: "descriptor count mismatch (fewer arrived)", bytes: rawHeader(length: 37, components: 1, descriptors: 1) + rawPort(0),
             descriptors: 0, error: .descriptorCountMismatch(expected: 1, actual: 0)),
    BadFrame(name: "descriptor count mismatch (more arrived)", bytes: rawHeader(length: 32),
             descriptors: 2, error: .descriptorCountMismatch(expected: 0, actual: 2)),
    BadFrame(name: "component header past end", bytes: rawHeader(length: 35, components: 1) + [0, 1, 0],
             error: .garbledComponent(index: 0, problem: .headerPastEnd(remaining: 3))),
    BadFrame(name: "component count larger than the body", bytes: rawHeader(length: 38, components: 2) + rawBytes([1]),
             error: .garbledComponent(index: 1, problem: .headerPastEnd(remaining: 0))),
    BadFrame(name: "component length past end", bytes: rawHeader(length: 40, components: 1) + [0] + le(UInt32(10)) + [1, 2, 3],
             error: .garbledComponent(index: 0, problem: .payloadPastEnd(length: 10, remaining: 3))),
    BadFrame(name: "component length at 4 GiB", bytes: rawHeader(length: 40, components: 1) + [0] + le(UInt32.max) + [1, 2, 3],
             error: .garbledComponent(index: 0, problem: .payloadPastEnd(length: Int(UInt32.max), remaining: 3))),
    BadFrame(name: "unknown component tag", bytes: rawHeader(length: 37, components: 1) + [3, 0, 0, 0, 0],
             error: .garbledComponent(index: 0, problem: .unknownTag(3))),
    BadFrame(name: "descriptor index out of range",
             bytes: rawHeader(length: 37, components: 1, descriptors: 1) + rawDescriptor(1),
             descriptors: 1, error: .descriptorIndexOutOfRange(index: 1, count: 1)),
    BadFrame(name: "port index out of range (huge)",
             bytes: rawHeader(length: 37, components: 1, descriptors: 1) + rawPort(.max),
             descriptors: 1, error: .descriptorIndexOutOfRange(index: Int(UInt32.max), count: 1)),
    BadFrame(name: "descriptor referenced twice",
             bytes: rawHeader(length: 42, components: 2, descriptors: 2) + rawPort(0) + rawDescriptor(0),
             descriptors: 2, error: .descriptorReferencedTwice(index: 0)),
    BadFrame(name: "component reuses the reply port",
             bytes: rawHeader(length: 37, components: 1, descriptors: 1, reply: 0) + rawPort(0),
             descriptors: 1, error: .descriptorReferencedTwice(index: 0)),
    BadFrame(name: "descriptor nobody references",
             bytes: rawHeader(length: 37, components: 1, descriptors: 2) + rawPort(1),
             descriptors: 2, error: .descriptorUnreferenced(index: 0)),
    BadFrame(name: "unused bytes after the last component",
             bytes: rawHeader(length: 40, components: 1) + rawBytes([1]) + [0, 0],
             error: .unusedBodyBytes(count: 2)),
    BadFrame(name: "too many components under configured limits",
             bytes: rawHeader(length: 42, components: 2) + rawBytes([]) + rawBytes([]),
             limits: WireLimits(maxComponents: 1), error: .tooManyComponents(count: 2, limit: 1)),
]

@Test(arguments: badFrames)
private func badFrameGetsItsError(_ frame: BadFrame) {
    #expect(decodeError(frame.bytes, descriptors: frame.descriptors, limits: frame.limits) == frame.error)
}

@Test func everyErrorExplainsItself() {
    for frame in badFrames {
        #expect(!frame.error.description.isEmpty)
    }
}

// MARK: - Stream splitter

private func drain(_ splitter: inout WireFrameSplitter) throws(WireError) -> [[UInt8]] {
    var frames: [[UInt8]] = []
    while let frame = try splitter.nextFrame() { frames.append(frame) }
    return frames
}

/// Three frames of different shapes back to back.
private let streamFrames: [[UInt8]] = [
    exampleFrame,
    rawHeader(length: 32),
    rawHeader(kind: 2, length: 32 + 5 + 3, id: 2, components: 1) + rawBytes([9, 8, 7]),
]

@Test func twoFramesInOneChunk() throws {
    var splitter = WireFrameSplitter()
    splitter.append(streamFrames[0] + streamFrames[1])
    #expect(try drain(&splitter) == [streamFrames[0], streamFrames[1]])
    #expect(splitter.bufferedByteCount == 0)
    try splitter.finish()
}

@Test func framesSplitAtEveryByteBoundary() throws {
    let stream = streamFrames.flatMap { $0 }
    for cut in 0...stream.count {
        var splitter = WireFrameSplitter()
        splitter.append(Array(stream[..<cut]))
        var frames = try drain(&splitter)
        splitter.append(Array(stream[cut...]))
        frames += try drain(&splitter)
        #expect(frames == streamFrames, "cut at \(cut)")
        try splitter.finish()
    }
}

@Test func framesFedOneByteAtATime() throws {
    var splitter = WireFrameSplitter()
    var frames: [[UInt8]] = []
    for byte in streamFrames.flatMap({ $0 }) {
        splitter.append([byte])
        frames += try drain(&splitter)
    }
    #expect(frames == streamFrames)
    #expect(splitter.bufferedByteCount == 0)
}

@Test func splitFramesDecode() throws {
    var splitter = WireFrameSplitter()
    splitter.append(exampleFrame)
    let frame = try #require(try splitter.nextFrame())
    #expect(try decode(frame, descriptors: 2) == exampleMessage)
}

@Test func oversizedLengthIsRefusedBeforeTheBodyArrives() {
    var splitter = WireFrameSplitter()
    // Only the first 12 bytes: magic, version, kind, flags, length.
    splitter.append(Array(rawHeader(length: hugeLength).prefix(12)))
    let expected = WireError.oversized(length: Int(hugeLength), limit: WireLimits.default.maxFrameBytes)
    #expect(throws: expected) { try splitter.nextFrame() }
    // The error sticks: the stream cannot be resynchronised, and later bytes are dropped.
    splitter.append(exampleFrame)
    #expect(splitter.bufferedByteCount == 0)
    #expect(throws: expected) { try splitter.nextFrame() }
    #expect(throws: expected) { try splitter.finish() }
}

@Test func badMagicIsRefusedFromTheFirstByte() {
    var splitter = WireFrameSplitter()
    splitter.append([0x47])  // "G", as in an HTTP "GET" sent to the wrong socket
    #expect(throws: WireError.badMagic) { try splitter.nextFrame() }
}

@Test func framesBeforeABadHeaderAreStillDelivered() throws {
    var splitter = WireFrameSplitter()
    splitter.append(streamFrames[0] + rawHeader(version: 9, length: 32) + streamFrames[1])
    #expect(try splitter.nextFrame() == streamFrames[0])
    #expect(throws: WireError.unsupportedVersion(9)) { try splitter.nextFrame() }
}

@Test func streamEndingInsideAFrameIsTruncated() throws {
    var splitter = WireFrameSplitter()
    splitter.append(streamFrames[1] + Array(streamFrames[2].prefix(10)))
    #expect(try drain(&splitter) == [streamFrames[1]])
    #expect(throws: WireError.truncated(expected: 32, actual: 10)) { try splitter.finish() }
    splitter.append(Array(streamFrames[2][10..<35]))
    #expect(throws: WireError.truncated(expected: 40, actual: 35)) { try splitter.finish() }
}

@Test func splitterRespectsConfiguredLimits() {
    var splitter = WireFrameSplitter(limits: WireLimits(maxFrameBytes: 39))
    splitter.append(streamFrames[2])
    #expect(throws: WireError.oversized(length: 40, limit: 39)) { try splitter.nextFrame() }
}

// MARK: The senders' stack encoders make the canonical frame

/// Bytes-only messages of several shapes: no component, one (empty, small, large), several.
private let bytesOnlyShapes: [[[UInt8]]] = [[], [[]], [[1, 2, 3]], [Array(repeating: 7, count: 900)], [[1], [], [2, 3]]]

@Test(arguments: bytesOnlyShapes.indices, [WireKind.message, .request, .reply])
func stackEncodersMatchEncode(shape: Int, kind: WireKind) throws {
    let payloads = bytesOnlyShapes[shape]
    let message = WireMessage(kind: kind, id: 42, sequence: 9, components: payloads.map { .bytes($0) })
    let canonical = try WireCodec.encode(message)
    #expect(WireCodec.bytesOnlyFrameLength(payloads) == canonical.count)
    var buffer = [UInt8](repeating: 0xEE, count: canonical.count)
    let written = try buffer.withUnsafeMutableBytes { raw in
        try WireCodec.encodeBytesOnly(kind: kind, id: 42, sequence: 9, payloads: payloads, into: raw)
    }
    #expect(written == canonical.count)
    #expect(buffer == canonical)
    guard payloads.count <= 1 else { return }
    var single = [UInt8](repeating: 0xEE, count: canonical.count)
    let singleWritten = try single.withUnsafeMutableBytes { raw in
        try (payloads.first ?? []).withUnsafeBytes { payload in
            try WireCodec.encodeSingleBytes(
                kind: kind, id: 42, sequence: 9, payload: payloads.isEmpty ? nil : payload, into: raw)
        }
    }
    #expect(singleWritten == canonical.count)
    #expect(single == canonical)
}

@Test func stackEncodersRefuseWhatEncodeRefuses() throws {
    let limits = WireLimits(maxFrameBytes: 40, maxComponents: 1)
    let big: [UInt8] = Array(repeating: 1, count: 10)
    var buffer = [UInt8](repeating: 0, count: 64)
    let single = buffer.withUnsafeMutableBytes { raw in
        big.withUnsafeBytes { payload in
            Result { () throws(WireError) -> Int in
                try WireCodec.encodeSingleBytes(kind: .message, id: 1, sequence: 0, payload: payload, into: raw, limits: limits)
            }
        }
    }
    #expect(throws: WireError.oversized(length: 47, limit: 40)) { try single.get() }
    let several = buffer.withUnsafeMutableBytes { raw in
        Result { () throws(WireError) -> Int in
            try WireCodec.encodeBytesOnly(
                kind: .message, id: 1, sequence: 0, payloads: [[], []], into: raw,
                limits: WireLimits(maxFrameBytes: 64, maxComponents: 1))
        }
    }
    #expect(throws: WireError.tooManyComponents(count: 2, limit: 1)) { try several.get() }
}

// MARK: The receivers' one-component path finds what the decoder finds

/// Frames the one-component path must take (`payload`) or leave to the decoder (`nil`).
private let singleBytesCases: [(frame: [UInt8], payload: [UInt8]?)] = [
    (rawHeader(length: 0, components: 1) + rawBytes(Array("hello".utf8)), Array("hello".utf8)),
    (rawHeader(length: 0, components: 1) + rawBytes([]), []),
    // Two components, a port, a reply port, a descriptor: not one plain bytes component.
    (rawHeader(length: 0, components: 2) + rawBytes([]) + rawBytes([]), nil),
    (rawHeader(length: 0, components: 1, descriptors: 1) + rawPort(0), nil),
    (rawHeader(length: 0, components: 1, descriptors: 1, reply: 0) + rawBytes([]), nil),
    // The component's length says more, or less, than the frame holds.
    (rawHeader(length: 0, components: 1) + rawBytes([1, 2]).dropLast(), nil),
    (rawHeader(length: 0, components: 1) + rawBytes([1]) + [0], nil),
]

@Test(arguments: singleBytesCases.indices)
func singleBytesPathAgreesWithTheDecoder(_ index: Int) throws {
    var (frame, expected) = singleBytesCases[index]
    // The header's length field is the frame's real length, so the header itself is valid.
    frame.replaceSubrange(8..<12, with: le(UInt32(frame.count)))
    try frame.withUnsafeBytes { bytes in
        let header = try #require(try WireHeader.parse(bytes, limits: .default))
        let payload = WireCodec.singleBytesPayload(bytes, header: header).map { [UInt8]($0) }
        #expect(payload == expected)
        if let payload {
            let decoded = try WireCodec.decodeComponents(bytes, header: header, descriptorCount: 0) { $0 }
            #expect(decoded == [.bytes(payload)])
        }
    }
}
