import Glibc
import PortKitSystem

extension Message {
    /// The most components a message may carry, on every transport (in-process, sockets,
    /// pipes): past it, sending throws `PortError.tooManyComponents`.
    public static let maxComponents = WireLimits.default.maxComponents
    /// The most ports and file descriptors, the reply port included, a message may carry,
    /// on every transport (Linux passes at most 253 descriptors with one message): past it,
    /// sending throws `PortError.tooManyDescriptors`.
    public static let maxDescriptors = WireLimits.default.maxDescriptors

    /// The bytes of its bytes components together (what the message-size limits count).
    var dataByteCount: Int {
        var size = 0
        for case .data(let bytes) in parts { size += bytes.count }
        return size
    }

    /// Checks the message against the limits every transport keeps, with `maxBytes` for its
    /// bytes components together; returns that total.
    /// - Throws: `.tooManyComponents`, `.tooManyDescriptors`, `.messageTooLarge`,
    ///   `.invalidDescriptor` (a descriptor component that is not open).
    func checkedSize(maxBytes: Int) throws(PortError) -> Int {
        guard parts.count <= Self.maxComponents else {
            throw .tooManyComponents(count: parts.count, limit: Self.maxComponents)
        }
        var size = 0
        var carried = replyPort == nil ? 0 : 1
        for component in parts {
            switch component {
            case .data(let bytes): size += bytes.count
            case .port: carried += 1
            case .descriptor(let fd):
                carried += 1
                // Checked here, so that a closed descriptor is named as such on every
                // transport (the kernel would refuse the whole frame with EBADF).
                guard FileDescriptor(rawValue: fd).isOpen else { throw .invalidDescriptor(fd) }
            }
        }
        guard carried <= Self.maxDescriptors else { throw .tooManyDescriptors(count: carried, limit: Self.maxDescriptors) }
        guard size <= maxBytes else { throw .messageTooLarge(size: size, limit: maxBytes) }
        return size
    }
}
