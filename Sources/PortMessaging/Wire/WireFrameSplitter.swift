/// Cuts a byte stream (a pipe or a SOCK_STREAM socket) into whole frames.
///
/// Feed it bytes as they arrive with `append(_:)`, then take frames with `nextFrame()`
/// until it returns `nil`. Each header is validated as soon as its bytes are in, so a
/// bad magic, unknown version or oversized length is known before the body is
/// buffered; bytes after a bad header are dropped, not kept. Frames that arrived
/// before the bad one are still handed out first, so nothing valid is lost; then the
/// error is thrown, and again on every later call, because a byte stream cannot be
/// resynchronised once a frame boundary is lost.
///
/// The splitter only delimits frames; the transport decodes each one with
/// `WireCodec.decode`, passing the descriptors that came with it.
package struct WireFrameSplitter: Sendable {
    /// The limits every header is checked against (the first's, `firstFrameLimits`, if
    /// given; from the next header on, when changed).
    package var limits: WireLimits
    /// The narrower limits of the stream's first frame, until that frame is whole: a
    /// server whose peers must begin with a small request refuses a larger first frame at
    /// its header instead of buffering it.
    private var firstFrameLimits: WireLimits?

    // Bytes not yet handed out live in buffer[consumed...]; buffer[consumed..<scanned]
    // holds complete frames whose headers were already validated.
    private var buffer: [UInt8] = []
    private var consumed = 0
    private var scanned = 0
    // The error found at `scanned`; thrown once the frames before it are taken.
    private var failure: WireError?

    /// Above this capacity the buffer is released when it empties, so one large frame
    /// does not pin its memory for the life of the connection.
    private static let retainedCapacity = 64 * 1024

    /// Creates an empty splitter; with `firstFrameLimits`, the first frame is held to them.
    package init(limits: WireLimits = .default, firstFrameLimits: WireLimits? = nil) {
        self.limits = limits
        self.firstFrameLimits = firstFrameLimits
    }

    /// Bytes appended but not yet returned as frames.
    package var bufferedByteCount: Int { buffer.count - consumed }

    /// The limits the next frame's header is held to (the first frame's until one is whole).
    package var headerLimits: WireLimits { firstFrameLimits ?? limits }

    /// Says a whole frame was taken from the stream without passing through the splitter
    /// (a reader that decodes whole frames in place): later ones are held to `limits`.
    package mutating func noteFrameTaken() { firstFrameLimits = nil }

    /// Appends bytes read from the stream and validates any header they complete.
    ///
    /// Never throws: an error is reported by `nextFrame()` in stream order, after the
    /// frames before it. Once an error is known, further bytes are ignored.
    package mutating func append(_ chunk: UnsafeRawBufferPointer) {
        guard failure == nil, !chunk.isEmpty else { return }
        compact()
        buffer.append(contentsOf: chunk)
        scan()
    }

    /// Appends bytes from an array; see `append(_:)`.
    package mutating func append(_ chunk: [UInt8]) {
        chunk.withUnsafeBytes { append($0) }
    }

    /// Returns the next whole frame, or `nil` if more bytes are needed.
    ///
    /// - Throws: the header error (`badMagic`, `unsupportedVersion`, `oversized`, …) of
    ///   the first bad frame in the stream, once every frame before it has been returned.
    package mutating func nextFrame() throws(WireError) -> [UInt8]? {
        guard consumed < scanned else {
            if let failure { throw failure }
            return nil
        }
        let length = buffer.withUnsafeBytes { raw in
            WireHeader.bytesNeeded(UnsafeRawBufferPointer(rebasing: raw[consumed...]))
        }
        // A buffer holding exactly one frame is handed over whole rather than copied,
        // which is the common case for a large frame read in pieces.
        if consumed == 0 && length == buffer.count {
            let frame = buffer
            buffer = []
            scanned = 0
            return frame
        }
        let frame = Array(buffer[consumed..<consumed + length])
        consumed += length
        return frame
    }

    /// Declares the end of the stream.
    ///
    /// - Throws: the stream's header error if there was one, or `truncated` if the
    ///   stream ended inside a frame. Frames still waiting in the splitter do not count
    ///   as an error; take them with `nextFrame()` first.
    package func finish() throws(WireError) {
        if let failure { throw failure }
        let partial = buffer.count - scanned
        guard partial > 0 else { return }
        let needed = buffer.withUnsafeBytes { raw in
            WireHeader.bytesNeeded(UnsafeRawBufferPointer(rebasing: raw[scanned...]))
        }
        throw .truncated(expected: needed, actual: partial)
    }

    /// Walks forward over every frame that is now complete, validating each header,
    /// and validates the partial header of the frame after them.
    private mutating func scan() {
        while scanned < buffer.count {
            let outcome = buffer.withUnsafeBytes { raw in
                Result { () throws(WireError) -> WireHeader? in
                    try WireHeader.parse(UnsafeRawBufferPointer(rebasing: raw[scanned...]), limits: firstFrameLimits ?? limits)
                }
            }
            switch outcome {
            case .failure(let error):
                failure = error
                // Nothing from here on can ever be delivered.
                buffer.removeSubrange(scanned...)
                return
            case .success(nil):
                return
            case .success(let header?):
                let available = buffer.count - scanned
                // Not reserving the announced length: a peer sending bare headers
                // would otherwise make us allocate a full frame per header for free.
                guard available >= header.frameLength else { return }
                scanned += header.frameLength
                firstFrameLimits = nil
            }
        }
    }

    /// Drops bytes already handed out, when that is cheap relative to what remains.
    private mutating func compact() {
        guard consumed > 0 else { return }
        if consumed == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= Self.retainedCapacity)
        } else if consumed >= buffer.count - consumed {
            // Moving at most as many bytes as were consumed keeps appends amortised O(1).
            buffer.removeSubrange(0..<consumed)
        } else {
            return
        }
        scanned -= consumed
        consumed = 0
    }
}
