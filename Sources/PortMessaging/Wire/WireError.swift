/// Why a frame could not be decoded, split from a stream, or encoded.
///
/// Every way a frame can be wrong has its own case, so a transport can tell a peer that
/// speaks another version from one that sends garbage, and tests can name the failure
/// they expect. Decoding never traps: each malformed input ends in one of these.
package enum WireError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The bytes end before the frame does. `expected` is the smallest byte count that
    /// could complete it as far as the header tells (the header size until the length
    /// field is readable, then the stated frame length).
    case truncated(expected: Int, actual: Int)
    /// The frame states (or, when encoding, would need) a length above the limit.
    case oversized(length: Int, limit: Int)
    /// The frame does not start with the magic bytes "PKWF".
    case badMagic
    /// The frame's format version is not one this decoder reads.
    case unsupportedVersion(UInt8)
    /// The kind byte names no `WireKind`.
    case unknownKind(UInt8)
    /// Flag bits outside `WireFlags.known` are set; the value holds just those bits.
    case unknownFlags(UInt16)
    /// The stated frame length is smaller than the header itself.
    case invalidLength(Int)
    /// The reserved header field is not zero.
    case reservedNotZero(UInt16)
    /// More components than the limit allows.
    case tooManyComponents(count: Int, limit: Int)
    /// More descriptors than the limit allows.
    case tooManyDescriptors(count: Int, limit: Int)
    /// The component at `index` (0-based, in frame order) is malformed.
    case garbledComponent(index: Int, problem: ComponentProblem)
    /// A port, descriptor or reply-port reference points past the descriptor array.
    case descriptorIndexOutOfRange(index: Int, count: Int)
    /// Two references name the same descriptor, which would give it two owners.
    case descriptorReferencedTwice(index: Int)
    /// No reference names this descriptor, which would leave it without an owner.
    case descriptorUnreferenced(index: Int)
    /// The header's descriptor count (`expected`) differs from the number of
    /// descriptors that actually arrived beside the frame (`actual`).
    case descriptorCountMismatch(expected: Int, actual: Int)
    /// Bytes remain inside the stated frame length after the last component.
    case unusedBodyBytes(count: Int)
    /// Bytes follow the end of the frame in a buffer that should hold exactly one.
    case trailingGarbage(count: Int)

    /// What is wrong with one component.
    package enum ComponentProblem: Hashable, Sendable, CustomStringConvertible {
        /// The tag byte names no component type.
        case unknownTag(UInt8)
        /// Fewer bytes remain in the frame than a component header needs.
        case headerPastEnd(remaining: Int)
        /// The bytes payload runs past the end of the frame.
        case payloadPastEnd(length: Int, remaining: Int)

        /// A one-line explanation.
        package var description: String {
            switch self {
            case .unknownTag(let tag):
                return "unknown component tag \(tag)"
            case .headerPastEnd(let remaining):
                return "component header needs \(WireLayout.componentHeaderSize) bytes, \(remaining) left in the frame"
            case .payloadPastEnd(let length, let remaining):
                return "payload of \(length) bytes, \(remaining) left in the frame"
            }
        }
    }

    /// A one-line explanation naming the numbers involved.
    package var description: String {
        switch self {
        case .truncated(let expected, let actual):
            return "truncated frame: needs \(expected) bytes, has \(actual)"
        case .oversized(let length, let limit):
            return "oversized frame: \(length) bytes, limit \(limit)"
        case .badMagic:
            return "bad magic: not a PortKit wire frame"
        case .unsupportedVersion(let version):
            return "unsupported wire version \(version) (this side reads \(WireLayout.version))"
        case .unknownKind(let kind):
            return "unknown message kind \(kind)"
        case .unknownFlags(let bits):
            return "unknown flag bits 0x\(String(bits, radix: 16))"
        case .invalidLength(let length):
            return "frame length \(length) is shorter than the \(WireLayout.headerSize)-byte header"
        case .reservedNotZero(let value):
            return "reserved header field is \(value), must be 0"
        case .tooManyComponents(let count, let limit):
            return "\(count) components, limit \(limit)"
        case .tooManyDescriptors(let count, let limit):
            return "\(count) descriptors, limit \(limit)"
        case .garbledComponent(let index, let problem):
            return "component \(index): \(problem)"
        case .descriptorIndexOutOfRange(let index, let count):
            return "descriptor index \(index) out of range for \(count) descriptors"
        case .descriptorReferencedTwice(let index):
            return "descriptor \(index) referenced twice"
        case .descriptorUnreferenced(let index):
            return "descriptor \(index) not referenced by any component or the reply port"
        case .descriptorCountMismatch(let expected, let actual):
            return "frame announces \(expected) descriptors, \(actual) arrived"
        case .unusedBodyBytes(let count):
            return "\(count) unused bytes after the last component"
        case .trailingGarbage(let count):
            return "\(count) bytes of trailing garbage after the frame"
        }
    }
}
