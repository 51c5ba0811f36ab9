/// A pseudo-random choice, the same sequence in every run and build (xorshift64).
struct RandomChoice: Sendable {
    private var seed: UInt64 = 0x9E37_79B9_7F4A_7C15

    /// A number in `0..<bound`.
    mutating func next(below bound: Int) -> Int {
        seed ^= seed << 13
        seed ^= seed >> 7
        seed ^= seed << 17
        return Int(seed % UInt64(bound))
    }
}
