/// The bounds a frame must stay within, on both the sending and the receiving side.
///
/// Every limit has a default and a typed error when it is exceeded: the encoder refuses
/// to build a frame past them (so the sender learns of it) and the decoder and stream
/// splitter reject a frame past them before buffering its body.
/// Values beyond what the format can express are clamped to it (a frame length fits in
/// 32 bits, a component or descriptor count in 16 bits).
package struct WireLimits: Hashable, Sendable {
    /// The largest whole frame, header included, in bytes.
    package var maxFrameBytes: Int {
        didSet { maxFrameBytes = Self.clamp(maxFrameBytes, WireLayout.headerSize, WireLayout.maxRepresentableFrame) }
    }
    /// The most components one message may carry.
    package var maxComponents: Int {
        didSet { maxComponents = Self.clamp(maxComponents, 0, WireLayout.maxRepresentableCount) }
    }
    /// The most descriptors (ports, file descriptors and the reply port) one frame may
    /// carry. The default stays under Linux's SCM_RIGHTS cap of 253 per message.
    package var maxDescriptors: Int {
        didSet { maxDescriptors = Self.clamp(maxDescriptors, 0, WireLayout.maxRepresentableCount) }
    }

    /// 16 MiB of message body; the header comes on top.
    package static let defaultMaxMessageBytes = 16 * 1024 * 1024
    /// The limits used when none are given: 16 MiB + header, 1024 components, 250 descriptors.
    package static let `default` = WireLimits()

    /// Creates limits; out-of-format values are clamped rather than trapped on, since a
    /// configuration value is not worth a crash.
    package init(
        maxFrameBytes: Int = WireLayout.headerSize + WireLimits.defaultMaxMessageBytes,
        maxComponents: Int = 1024,
        maxDescriptors: Int = 250
    ) {
        self.maxFrameBytes = Self.clamp(maxFrameBytes, WireLayout.headerSize, WireLayout.maxRepresentableFrame)
        self.maxComponents = Self.clamp(maxComponents, 0, WireLayout.maxRepresentableCount)
        self.maxDescriptors = Self.clamp(maxDescriptors, 0, WireLayout.maxRepresentableCount)
    }

    private static func clamp(_ value: Int, _ low: Int, _ high: Int) -> Int {
        min(max(value, low), high)
    }
}
