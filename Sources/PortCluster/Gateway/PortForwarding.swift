import PortMessaging

/// How a relay passes a caller's message on to the port it relays to, and the reply back:
/// the one rule a node's gateway (callers on other hosts, owners here) and a node's remote
/// ports (callers here, owners on other hosts) share.
///
/// Only the message's id and data travel on (over TCP nothing else can). A request goes
/// as a request, its reply coming back through the caller's `PendingReply` when it comes,
/// without a thread or task waiting for it. A fault never loses a message unsaid: when
/// the target cannot take a one-way message, or is gone, the caller is cut off
/// (`dropCaller`: it sees `PortError.peerDied`, as it would next to the owner); a request
/// the target does not answer in time is refused (`PortError.noReply`).
enum PortForwarding {
    /// How long passing a message on waits for room at the target.
    static let sendTimeout: Duration = .seconds(5)
    /// How long a request passed on waits for the target's reply.
    static let replyTimeout: Duration = .seconds(60)

    /// Passes `message` on to `target`, answering `reply` (a request's) with what it says;
    /// `answered` is called once a request's outcome is known (answered, refused or dropped).
    static func forward(
        _ message: Message, reply: PendingReply?, to target: SendPort, dropCaller: @escaping @Sendable () -> Void,
        answered: @escaping @Sendable () -> Void = {}
    ) {
        let forwarded = Message(id: message.id, components: message.components)
        guard let reply else {
            do { try target.send(forwarded, timeout: sendTimeout) } catch { dropCaller() }
            return
        }
        do {
            try target.request(forwarded, sendTimeout: sendTimeout, receiveTimeout: replyTimeout) { outcome in
                defer { answered() }
                switch outcome {
                case .success(let answer): _ = reply.reply(Message(id: answer.id, components: answer.components))
                case .failure(.peerDied), .failure(.invalidPort): dropCaller()
                case .failure: _ = reply.refuse()
                }
            }
        } catch {
            defer { answered() }
            switch error {
            case .sendTimedOut, .messageTooLarge, .cannotCrossHosts: _ = reply.refuse()
            default: dropCaller()
            }
        }
    }
}
