import Synchronization

/// What a descriptor source is watching for, or what it was found ready for.
public struct DescriptorEvents: OptionSet, Hashable, Sendable {
    /// The raw bits.
    public let rawValue: UInt32
    /// Makes a set from raw bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// The descriptor can be read (or its peer closed: a read returns 0).
    public static let readable = DescriptorEvents(rawValue: 1 << 0)
    /// The descriptor can be written without blocking.
    public static let writable = DescriptorEvents(rawValue: 1 << 1)
    /// The peer hung up or shut down its end. Reported with `readable`; asked for alone, it
    /// watches a connection for its peer's death without being woken by incoming data.
    public static let hangup = DescriptorEvents(rawValue: 1 << 2)
    /// An error is pending (reported, never asked for).
    public static let error = DescriptorEvents(rawValue: 1 << 3)
}

/// Watches a file descriptor and calls a handler on the loop's thread when it is ready.
///
/// Readiness is level-triggered: the handler is called on every pass while the
/// descriptor stays ready, so it should read (or write) until it would block. The source
/// does not own the descriptor: close it only after removing or invalidating the source.
/// One source per descriptor per loop. While the loop runs a mode the source is not in,
/// the descriptor is parked in the kernel (no busy wake-ups) and re-armed on return.
public final class DescriptorSource: Sendable {
    /// The watched descriptor.
    public let descriptor: CInt
    /// What it is watched for.
    public let events: DescriptorEvents
    let handler: @Sendable (DescriptorSource, DescriptorEvents) -> Void
    let attachment = AttachmentLock(Attachment())
    let token: SourceToken

    private static let tokens = Atomic<UInt64>(1)

    /// Makes a descriptor source.
    /// - Parameters:
    ///   - descriptor: the descriptor to watch; the caller keeps ownership.
    ///   - events: `.readable`, `.writable`, both, or `.hangup` alone.
    ///   - handler: called on the loop's thread with the source and what is ready.
    public init(
        descriptor: CInt, events: DescriptorEvents = .readable,
        handler: @escaping @Sendable (DescriptorSource, DescriptorEvents) -> Void
    ) {
        self.descriptor = descriptor
        self.events = events.intersection([.readable, .writable, .hangup])
        self.handler = handler
        self.token = SourceToken(Self.tokens.wrappingAdd(1, ordering: .relaxed).oldValue)
    }

    /// Whether the source is still watching.
    public var isValid: Bool { attachment.withLock { $0.isValid } }

    /// Stops watching for good. On the loop's thread, no callback runs after this returns;
    /// from another thread, callbacks stop once the loop has processed it (its next pass).
    public func invalidate() {
        let loop = attachment.withLock { $0.invalidate() }
        loop?.itemInvalidated(.descriptor(self))
    }

    var pollInterest: PollEvents {
        var interest: PollEvents = []
        if events.contains(.readable) { interest.insert(.readable) }
        if events.contains(.writable) { interest.insert(.writable) }
        if events.contains(.hangup) { interest.insert(.hangup) }
        return interest
    }
}

/// A descriptor source's key in its loop's tables, and the token its poller reports it by.
///
/// Hashed with one multiplication instead of the standard library's SipHash (about 60
/// instructions a lookup, and a loop looks a source up on every event, add and removal):
/// tokens are consecutive numbers this process hands out, never input from outside, so a
/// hash that resists chosen keys buys nothing here.
struct SourceToken: Hashable {
    /// The token's number (the poller's `PollEvent.token`).
    let raw: UInt64

    init(_ raw: UInt64) { self.raw = raw }

    func hash(into hasher: inout Hasher) { hasher.combine(raw) }

    // Dictionary asks this, not `hash(into:)`.
    func _rawHashValue(seed: Int) -> Int { multiplicativeHash(raw, seed: seed) }
}

/// `raw` hashed for a dictionary's buckets (a key's `_rawHashValue(seed:)`) with one
/// multiplication, for keys this process hands out itself, where a hash that resists chosen
/// keys buys nothing. The product's high half, where a multiplicative hash mixes best, is
/// folded onto the low bits that pick a bucket.
package func multiplicativeHash(_ raw: UInt64, seed: Int) -> Int {
    let mixed = (raw ^ UInt64(UInt(bitPattern: seed))) &* 0x9E37_79B9_7F4A_7C15
    return Int(truncatingIfNeeded: mixed ^ (mixed >> 32))
}
