/// A container an `EncodingStream` has open: where its one-byte count placeholder is, how
/// many entries so far.
struct OpenContainer {
    var id: Int
    var countOffset: Int
    var count: UInt64

    static let none = OpenContainer(id: 0, countOffset: 0, count: 0)
}

/// The containers an encoding has open, outermost first: the first `inlineCount` levels
/// kept in the stream itself, deeper ones in an array.
///
/// Most values nest a few containers deep: their encoding then allocates no array for the
/// stack, one allocation fewer per value encoded.
struct OpenContainers {
    static let inlineCount = 8

    private var inline = InlineArray<8, OpenContainer>(repeating: .none)
    /// The levels from `inlineCount` on.
    private var deeper: [OpenContainer] = []
    private(set) var count = 0

    mutating func append(_ container: OpenContainer) {
        if count < Self.inlineCount {
            inline[count] = container
        } else {
            deeper.append(container)
        }
        count += 1
    }

    mutating func removeLast() -> OpenContainer {
        count -= 1
        return count < Self.inlineCount ? inline[count] : deeper.removeLast()
    }

    subscript(level: Int) -> OpenContainer {
        get { level < Self.inlineCount ? inline[level] : deeper[level - Self.inlineCount] }
        set {
            if level < Self.inlineCount {
                inline[level] = newValue
            } else {
                deeper[level - Self.inlineCount] = newValue
            }
        }
    }
}
