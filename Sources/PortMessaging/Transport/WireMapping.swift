import Glibc
import PermanentThread
import PortKitSystem

/// Maps public `Message` values to wire frames and back.
enum WireMapping {
    /// A frame ready to write: bytes, the descriptors to send with it, and the descriptors
    /// made only for this frame (ends of fresh socket pairs) to close once it is written.
    struct Outgoing {
        var bytes: [UInt8]
        var descriptors: [CInt]
        var transient: [FileDescriptor]
        /// What hands the other ends of travelling ports to their owners, once the frame is
        /// written (`true`) or given up (`false`).
        var handOffs: [@Sendable (Bool) -> Void] = []

        /// Closes this side's copies of the ends sent, and hands the other ends over (or
        /// drops them when the frame did not go).
        func closeTransient(sent: Bool = false) {
            for fd in transient { try? fd.close() }
            for handOff in handOffs { handOff(sent) }
        }
    }

    /// The largest frame `withFrame` encodes on the stack; larger ones go to the heap.
    /// Up to 1 KiB a temporary allocation is always on the stack; above, the standard
    /// library first asks how much stack is left, which on Linux can cost more than the
    /// heap allocation it saves.
    static let stackFrameLimit = 1024

    /// Encodes `message` and runs `body` with the frame and the descriptors to send with it.
    ///
    /// A message of bytes components only, without a reply port, whose frame is small (the
    /// usual request, reply or one-way message) is encoded into stack memory: no array for
    /// the components, none for the frame. Anything else goes through `frame(for:…)`.
    static func withFrame<R>(
        for message: Message, kind: WireKind, sequence: UInt64, limits: WireLimits,
        _ body: (FrameBytes, [CInt]) throws(PortError) -> R
    ) throws(PortError) -> R {
        if message.replyPort == nil, message.parts.count <= 1 {
            // The usual message: one bytes component or none.
            if message.parts.isEmpty {
                return try withSingleBytesFrame(id: message.id, kind: kind, sequence: sequence, payload: nil, limits: limits, body)
            }
            if case .data(let bytes) = message.parts[0] {
                guard bytes.count <= limits.maxMessageBytes else {
                    throw .messageTooLarge(size: bytes.count, limit: limits.maxMessageBytes)
                }
                if WireLayout.headerSize + WireLayout.componentHeaderSize + bytes.count <= stackFrameLimit {
                    // Array.withUnsafeBytes only rethrows untyped errors: carry the typed one out.
                    let result = bytes.withUnsafeBytes { payload in
                        Result { () throws(PortError) -> R in
                            try withSingleBytesFrame(id: message.id, kind: kind, sequence: sequence, payload: payload, limits: limits, body)
                        }
                    }
                    return try result.get()
                }
                if bytes.count >= gatherThreshold {
                    // A large payload is not copied into a frame: the write gathers it after
                    // the header, from the message's own array.
                    let result = bytes.withUnsafeBytes { payload in
                        Result { () throws(PortError) -> R in
                            try withGatheredFrame(id: message.id, kind: kind, sequence: sequence, payload: payload, limits: limits, body)
                        }
                    }
                    return try result.get()
                }
            }
        }
        if message.replyPort == nil, let payloads = bytesOnly(message.parts) {
            _ = try message.checkedSize(maxBytes: limits.maxMessageBytes)
            let length = WireCodec.bytesOnlyFrameLength(payloads)
            if length <= stackFrameLimit {
                return try withUnsafeTemporaryAllocation(byteCount: length, alignment: 8) {
                    (buffer) throws(PortError) -> R in
                    let written: Int
                    do throws(WireError) {
                        written = try WireCodec.encodeBytesOnly(
                            kind: kind, id: message.id, sequence: sequence, payloads: payloads, into: buffer, limits: limits)
                    } catch {
                        throw PortError.malformed(error.description)
                    }
                    return try body(FrameBytes(UnsafeRawBufferPointer(rebasing: buffer[..<written])), [])
                }
            }
        }
        let frame = try frame(for: message, kind: kind, sequence: sequence, limits: limits)
        // Array.withUnsafeBytes only rethrows untyped errors: carry the typed one out.
        let result = frame.bytes.withUnsafeBytes { bytes in
            Result { () throws(PortError) -> R in try body(FrameBytes(bytes), frame.descriptors) }
        }
        if case .success = result { frame.closeTransient(sent: true) } else { frame.closeTransient() }
        return try result.get()
    }

    /// The payload size from which a one-component message is written gathered (its header
    /// on the stack, its payload where it is) rather than encoded into a frame array.
    static let gatherThreshold = 16 * 1024

    /// Runs `body` with the frame of a message of one bytes component, `payload`: its header
    /// and component header on the stack, then the payload itself.
    private static func withGatheredFrame<R>(
        id: UInt32, kind: WireKind, sequence: UInt64, payload: UnsafeRawBufferPointer, limits: WireLimits,
        _ body: (FrameBytes, [CInt]) throws(PortError) -> R
    ) throws(PortError) -> R {
        let headSize = WireLayout.headerSize + WireLayout.componentHeaderSize
        return try withUnsafeTemporaryAllocation(byteCount: headSize, alignment: 8) { (buffer) throws(PortError) -> R in
            do throws(WireError) {
                _ = try WireCodec.encodeSingleBytesHead(
                    kind: kind, id: id, sequence: sequence, payloadCount: payload.count, into: buffer, limits: limits)
            } catch {
                throw PortError.malformed(error.description)
            }
            return try body(FrameBytes(head: UnsafeRawBufferPointer(buffer), body: payload), [])
        }
    }

    /// Encodes a message of at most one small bytes component on the stack and runs `body`
    /// with the frame.
    private static func withSingleBytesFrame<R>(
        id: UInt32, kind: WireKind, sequence: UInt64, payload: UnsafeRawBufferPointer?, limits: WireLimits,
        _ body: (FrameBytes, [CInt]) throws(PortError) -> R
    ) throws(PortError) -> R {
        let length = WireLayout.headerSize + (payload.map { WireLayout.componentHeaderSize + $0.count } ?? 0)
        return try withUnsafeTemporaryAllocation(byteCount: length, alignment: 8) { (buffer) throws(PortError) -> R in
            let written: Int
            do throws(WireError) {
                written = try WireCodec.encodeSingleBytes(
                    kind: kind, id: id, sequence: sequence, payload: payload, into: buffer, limits: limits)
            } catch {
                throw PortError.malformed(error.description)
            }
            return try body(FrameBytes(UnsafeRawBufferPointer(rebasing: buffer[..<written])), [])
        }
    }

    /// The payloads of `components` when they are all bytes components, else `nil`.
    private static func bytesOnly(
        _ components: MessageParts
    ) -> LazyMapCollection<MessageParts, [UInt8]>? {
        for component in components {
            guard case .data = component else { return nil }
        }
        return components.lazy.map { component -> [UInt8] in
            if case .data(let bytes) = component { return bytes }
            return []  // unreachable: every component was checked to be bytes
        }
    }

    /// Encodes `message`. Ports become fresh connection ends (made here, closed by the
    /// caller after the write through `closeTransient`).
    static func frame(
        for message: Message, kind: WireKind, sequence: UInt64, limits: WireLimits
    ) throws(PortError) -> Outgoing {
        _ = try message.checkedSize(maxBytes: limits.maxMessageBytes)
        var outgoing = Outgoing(bytes: [], descriptors: [], transient: [])
        var components: [WireComponent] = []
        components.reserveCapacity(message.parts.count)
        do throws(PortError) {
            for component in message.parts {
                switch component {
                case .data(let bytes):
                    components.append(.bytes(bytes))
                case .port(let port):
                    let (end, handOff) = try port.transferableEnd()
                    outgoing.transient.append(end)
                    if let handOff { outgoing.handOffs.append(handOff) }
                    components.append(.port(index: outgoing.descriptors.count))
                    outgoing.descriptors.append(end.rawValue)
                case .descriptor(let fd):
                    components.append(.descriptor(index: outgoing.descriptors.count))
                    outgoing.descriptors.append(fd)
                }
            }
            var replyIndex: Int?
            if let reply = message.replyPort {
                let (end, handOff) = try reply.transferableEnd()
                outgoing.transient.append(end)
                if let handOff { outgoing.handOffs.append(handOff) }
                replyIndex = outgoing.descriptors.count
                outgoing.descriptors.append(end.rawValue)
            }
            let wire = WireMessage(kind: kind, id: message.id, sequence: sequence, replyPort: replyIndex, components: components)
            do {
                outgoing.bytes = try WireCodec.encode(wire, limits: limits)
            } catch {
                throw PortError.malformed(error.description)
            }
            return outgoing
        } catch {
            outgoing.closeTransient()
            throw error
        }
    }

    /// The message component a decoded wire component stands for; a port or descriptor
    /// takes ownership of its entry of `descriptors` (the frame's, in order).
    static func component(from wire: WireComponent, descriptors: [CInt], limits: WireLimits) -> MessageComponent {
        switch wire {
        case .bytes(let bytes): .data(bytes)
        case .port(let index): .port(sendPort(descriptors[index], limits: limits))
        case .descriptor(let index): .descriptor(descriptors[index])
        }
    }

    /// A send port over a received connection end (a port that travelled in a frame).
    static func sendPort(_ descriptor: CInt, limits: WireLimits) -> SendPort {
        SendPort(connection: Connection(.socket(FileDescriptor(rawValue: descriptor)), limits: limits))
    }
}
