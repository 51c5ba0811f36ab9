// The adopt-connection frame: in Transport, not Wire, because its failure is a PortError
// (the Wire folder compiles alone, for the codec fuzzer).
extension WireCodec {
    /// The frame that asks the peer to adopt the descriptor sent with it.
    static func encodeControl() throws(PortError) -> [UInt8] {
        guard let frame = adoptFrame else { throw .malformed("the adopt-connection frame does not encode") }
        return frame
    }

    /// The adopt-connection frame, encoded once: every one is the same.
    private static let adoptFrame = try? encode(WireMessage(kind: .adoptConnection, id: 0, components: [.descriptor(index: 0)]))
}
