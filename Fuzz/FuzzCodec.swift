// libFuzzer target for the wire codec, compiled together with
// Sources/PortMessaging/Wire/*.swift by scripts/fuzz-codec.sh (not a SwiftPM target:
// SwiftPM cannot link a -sanitize=fuzzer executable, see TOOLCHAIN.md).
//
// A decode error is a correct answer, not a finding. What must never happen is a trap
// inside the codec (libFuzzer and ASan catch those), or one of the invariants below
// failing; only those trap here, deliberately, so libFuzzer records the input.

/// Small limits so the fuzzer reaches the oversized and too-many paths with short inputs.
private let smallLimits = WireLimits(maxFrameBytes: 512, maxComponents: 16, maxDescriptors: 8)

/// libFuzzer's entry point: checks the decoder and the stream splitter on one input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCodec(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size)
    checkDecode(bytes, limits: .default)
    checkDecode(bytes, limits: smallLimits)
    checkSingleBytes(bytes, limits: .default)
    checkSplitter(bytes, limits: .default)
    checkSplitter(bytes, limits: smallLimits)
    return 0
}

private func invariant(_ condition: Bool, _ what: @autoclosure () -> String) {
    if !condition { fatalError("wire codec invariant broken: \(what())") }
}

/// Decodes with the descriptor count the header announces (so the body gets parsed,
/// not just refused for a mismatch); a frame that decodes must re-encode to the very
/// same bytes and decode again to an equal value.
private func checkDecode(_ bytes: UnsafeRawBufferPointer, limits: WireLimits) {
    let announced = bytes.count >= WireLayout.descriptorCountOffset + 2
        ? Int(bytes.wireLoad(UInt16.self, at: WireLayout.descriptorCountOffset)) : 0
    let message: WireMessage
    do {
        message = try WireCodec.decode(bytes, descriptorCount: announced, limits: limits)
    } catch {
        return
    }
    invariant(message.descriptorCount == announced, "descriptor count \(message.descriptorCount) != \(announced)")
    let encoded: [UInt8]
    do {
        encoded = try WireCodec.encode(message, limits: limits)
    } catch {
        fatalError("wire codec invariant broken: decoded message does not re-encode: \(error)")
    }
    invariant(encoded.elementsEqual(bytes), "re-encoding differs from the decoded bytes")
    let again = try? WireCodec.decode(encoded, descriptorCount: announced, limits: limits)
    invariant(again == message, "round trip changed the message")
    // The same frame with descriptors missing or extra must never be accepted.
    let short = try? WireCodec.decode(bytes, descriptorCount: announced + 1, limits: limits)
    invariant(short == nil, "accepted a descriptor count mismatch")
}

/// The one-component fast path agrees with the full decoder: whatever payload it finds,
/// the frame decodes (without descriptors) to exactly that one bytes component.
private func checkSingleBytes(_ bytes: UnsafeRawBufferPointer, limits: WireLimits) {
    guard let header = try? WireHeader.parse(bytes, limits: limits),
        let payload = WireCodec.singleBytesPayload(bytes, header: header)
    else { return }
    let decoded = try? WireCodec.decodeComponents(bytes, header: header, descriptorCount: 0) { $0 }
    invariant(decoded == [.bytes([UInt8](payload))], "the single-component path found a payload the decoder does not")
}

/// What a splitter made of a stream: its frames and how it ended.
private struct SplitOutcome: Equatable {
    var frames: [[UInt8]] = []
    var error: WireError?
}

/// Splits the input fed whole and fed in small uneven chunks (drained after each);
/// both must give the same frames and the same ending, and the frames must be the
/// stream's own bytes, each a header-valid frame of its stated length.
private func checkSplitter(_ bytes: UnsafeRawBufferPointer, limits: WireLimits) {
    var whole = WireFrameSplitter(limits: limits)
    whole.append(bytes)
    let wholeOutcome = drain(&whole, finishing: true)

    var chunked = WireFrameSplitter(limits: limits)
    var chunkedOutcome = SplitOutcome()
    var offset = 0
    var step = 0
    while offset < bytes.count {
        // Chunk sizes 1...7 chosen by the data itself, so they vary between inputs.
        let length = min(bytes.count - offset, 1 + Int(bytes[step % bytes.count]) % 7)
        chunked.append(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]))
        offset += length
        step += 1
        let part = drain(&chunked, finishing: false)
        chunkedOutcome.frames += part.frames
        if part.error != nil { chunkedOutcome.error = part.error; break }
    }
    if chunkedOutcome.error == nil {
        chunkedOutcome.error = drain(&chunked, finishing: true).error
    }
    invariant(wholeOutcome == chunkedOutcome, "chunked split differs from whole split")

    var position = 0
    for frame in wholeOutcome.frames {
        invariant(bytes.count - position >= frame.count, "frame longer than the stream")
        invariant(frame.elementsEqual(bytes[position..<position + frame.count]), "frame is not the stream's bytes")
        position += frame.count
        let header = frame.withUnsafeBytes { raw in try? WireHeader.parse(raw, limits: limits) }
        invariant(header?.frameLength == frame.count, "frame length does not match its header")
        // Decoding the frame must not trap whatever it says; errors are fine.
        _ = try? WireCodec.decode(frame, descriptorCount: header?.descriptorCount ?? 0, limits: limits)
    }
}

private func drain(_ splitter: inout WireFrameSplitter, finishing: Bool) -> SplitOutcome {
    var outcome = SplitOutcome()
    do {
        while let frame = try splitter.nextFrame() { outcome.frames.append(frame) }
        if finishing { try splitter.finish() }
    } catch {
        outcome.error = error
    }
    return outcome
}
