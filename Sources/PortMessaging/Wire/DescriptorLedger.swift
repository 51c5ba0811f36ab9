/// Tracks which indices of a frame's descriptor array have been referenced, to enforce
/// "each descriptor exactly once" without a heap allocation: the bits live in a
/// temporary (stack) allocation for the duration of one encode or decode.
struct DescriptorLedger {
    private let words: UnsafeMutableBufferPointer<UInt64>
    /// The size of the descriptor array being checked.
    let count: Int

    /// Runs `body` with an empty ledger for `count` descriptors.
    static func with<R>(
        count: Int, _ body: (DescriptorLedger) throws(WireError) -> R
    ) throws(WireError) -> R {
        // No descriptors (the usual frame): nothing to track, no allocation. Every claim
        // then fails its range check before touching a word.
        if count == 0 {
            return try body(DescriptorLedger(words: UnsafeMutableBufferPointer(start: nil, count: 0), count: 0))
        }
        let wordCount = (count + 63) / 64
        return try withUnsafeTemporaryAllocation(of: UInt64.self, capacity: wordCount) {
            (words) throws(WireError) -> R in
            words.initialize(repeating: 0)
            return try body(DescriptorLedger(words: words, count: count))
        }
    }

    /// Records a reference to `index`.
    /// - Throws: `descriptorIndexOutOfRange` or `descriptorReferencedTwice`.
    func claim(_ index: Int) throws(WireError) {
        guard index >= 0, index < count else {
            throw .descriptorIndexOutOfRange(index: index, count: count)
        }
        let (word, bit) = index.quotientAndRemainder(dividingBy: 64)
        let mask: UInt64 = 1 << UInt64(bit)
        guard words[word] & mask == 0 else { throw .descriptorReferencedTwice(index: index) }
        words[word] |= mask
    }

    /// - Throws: `descriptorUnreferenced` naming the lowest index nobody claimed.
    func requireAllClaimed() throws(WireError) {
        for index in 0..<count {
            let (word, bit) = index.quotientAndRemainder(dividingBy: 64)
            if words[word] & (1 << UInt64(bit)) == 0 { throw .descriptorUnreferenced(index: index) }
        }
    }
}
