import Glibc
import PermanentThread

/// Maps public `Message` values to wire frames and back.
enum WireMapping {
    /// A frame ready to write: bytes, the descriptors to send with it, and the descriptors
    /// made only for this frame (ends of fresh socket pairs) to close once it is written.
    struct Outgoing {
        var bytes: [UInt8]
        var descriptors: [CInt]
        var transient: [FileDescriptor]

        func closeTransient() { for fd in transient { try? fd.close() } }
    }

    /// Encodes `message`. Ports become fresh connection ends (made here, closed by the
    /// caller after the write through `closeTransient`).
    static func frame(
        for message: Message, kind: WireKind, sequence: UInt64, limits: WireLimits
    ) throws(PortError) -> Outgoing {
        var size = 0
        for case .data(let bytes) in message.components { size += bytes.count }
        guard size <= limits.maxMessageBytes else { throw .messageTooLarge(size: size, limit: limits.maxMessageBytes) }
        var outgoing = Outgoing(bytes: [], descriptors: [], transient: [])
        var components: [WireComponent] = []
        components.reserveCapacity(message.components.count)
        do throws(PortError) {
            for component in message.components {
                switch component {
                case .data(let bytes):
                    components.append(.bytes(bytes))
                case .port(let port):
                    let end = try port.transferableEnd()
                    outgoing.transient.append(end)
                    components.append(.port(index: outgoing.descriptors.count))
                    outgoing.descriptors.append(end.rawValue)
                case .descriptor(let fd):
                    components.append(.descriptor(index: outgoing.descriptors.count))
                    outgoing.descriptors.append(fd)
                }
            }
            var replyIndex: Int?
            if let reply = message.replyPort {
                let end = try reply.transferableEnd()
                outgoing.transient.append(end)
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

    /// Builds the message a decoded frame carries; takes ownership of `descriptors`.
    static func message(from wire: WireMessage, descriptors: [CInt], limits: WireLimits) -> Message {
        var components: [MessageComponent] = []
        components.reserveCapacity(wire.components.count)
        for component in wire.components {
            switch component {
            case .bytes(let bytes): components.append(.data(bytes))
            case .port(let index):
                components.append(.port(SendPort(connection: Connection(.socket(FileDescriptor(rawValue: descriptors[index])), limits: limits))))
            case .descriptor(let index): components.append(.descriptor(descriptors[index]))
            }
        }
        let reply = wire.replyPort.map {
            SendPort(connection: Connection(.socket(FileDescriptor(rawValue: descriptors[$0])), limits: limits))
        }
        return Message(id: wire.id, components: components, replyPort: reply)
    }
}
