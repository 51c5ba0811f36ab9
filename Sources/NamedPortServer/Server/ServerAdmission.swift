import Glibc
import PermanentThread
import PortMessaging

/// Turning a connection away at the door: a user the policy refuses, a server at its
/// connection limit or out of descriptors. The client is told why (a `closing` notice,
/// which it reads as the error of its hello) and the socket is closed at once, so it is
/// never counted against the limits and never waits for a hello time-out.
enum ServerAdmission {
    /// Tells the client of `socket` why it is refused, then closes the socket.
    static func turnAway(_ socket: FileDescriptor, _ error: NameServerError) {
        defer { try? socket.close() }
        let (status, fields) = NameReply.encode(error)
        let notice = WireMessage(
            kind: .message, id: NameNotice.closing.rawValue,
            components: [NameField.integer(status.rawValue)] + fields)
        // A fresh socket's buffer is empty: the notice goes whole or not at all.
        if let frame = try? notice.frame() {
            _ = frame.bytes.withUnsafeBytes { raw in Result { () throws(Errno) in try socket.send(raw) } }
        }
        // What the client sent already (its hello) is read first: closing over unread bytes
        // resets the connection, and a reset could reach the client before the notice.
        var scratch = [UInt8](repeating: 0, count: 1024)
        for _ in 0..<4 {
            let count = scratch.withUnsafeMutableBytes { raw in
                (try? socket.receive(into: raw, maxDescriptors: FrameReader.maxDescriptorsPerRead)).map { received in
                    closeDescriptors(received.descriptors)
                    return received.count
                } ?? 0
            }
            if count < scratch.count { break }
        }
    }
}

/// A descriptor kept open for the moment the process runs out: closing it makes room to
/// accept one connection and tell it the server is busy, instead of leaving it in the
/// backlog until its hello times out.
struct SpareDescriptor {
    private var descriptor: FileDescriptor?

    /// Opens the spare (`/dev/null`).
    init() { descriptor = try? FileSystem.openNull() }

    /// Whether the spare is held.
    var isHeld: Bool { descriptor != nil }

    /// Releases the spare for `body`, then takes it again.
    mutating func spend<R>(_ body: () -> R) -> R {
        try? descriptor?.close()
        descriptor = nil
        defer { descriptor = try? FileSystem.openNull() }
        return body()
    }

    /// Closes the spare for good.
    mutating func close() {
        try? descriptor?.close()
        descriptor = nil
    }
}
