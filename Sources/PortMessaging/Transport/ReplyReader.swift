import PermanentThread

/// Who reads an unbound connection (one no receive port's loop reads) for its requesters,
/// now and from now on. One thread reads at a time; it hands every reply it reads to the
/// request it answers, whichever thread or task waits for it.
///
///                       a requester waits              it leaves
///     nobody ───────────────────────────▶ requester ───────────────▶ nobody
///       │                                     │
///       │ an async request or                 │ an async request or `readReplies(on:)`
///       │ `readReplies(on:)` names a loop     ▼ names a loop meanwhile
///       │                              requester(then: loop) ──it leaves──┐
///       ▼                                                                 ▼
///     loop(loop) ◀──────────────────────────────────────────── the loop starts reading
///       │
///       ├── the loop cannot watch the connection ──▶ nobody
///       └── the loop's thread ends ──▶ nobody ──▶ loop(the shared reply loop)
///
/// - `nobody`: the next requester that waits takes the reading: the direct reply wait, a
///   receive with a time-out on the connection alone, which keeps a round trip near a raw
///   exchange's.
/// - `requester`: a blocked requester reads; the others wait on the request table's
///   condition to be handed their replies, or the reading when it leaves.
/// - `loop`: a loop reads for good (the shared reply loop, or one chosen with
///   `SendPort.readReplies(on:)`), through a descriptor source; no requester reads again.
///   Should a chosen loop's thread end first, the shared reply loop takes over.
///
/// A connection bound to a receive port is read by that port's loop instead (see
/// `Connection.awaitReply`); this state is then not consulted.
enum ReplyReader {
    case nobody
    /// A requester reads; `then`, when set, is the loop that takes the reading over for
    /// good as it leaves.
    case requester(then: ThreadLoop?)
    case loop(ThreadLoop)

    /// Whether a loop reads for good.
    var isLoop: Bool {
        if case .loop = self { true } else { false }
    }

    /// The loop named to read, whether or not it reads yet.
    var chosenLoop: ThreadLoop? {
        switch self {
        case .nobody: nil
        case .requester(let then): then
        case .loop(let loop): loop
        }
    }

    /// A requester takes the reading, if no one has it: true when it is now the reader.
    mutating func takeForRequester() -> Bool {
        guard case .nobody = self else { return false }
        self = .requester(then: nil)
        return true
    }

    /// The reading requester leaves; the loop that must start reading now, if one was
    /// named meanwhile.
    mutating func requesterLeaves() -> ThreadLoop? {
        guard case .requester(let then) = self else { return nil }
        self = then.map { .loop($0) } ?? .nobody
        return then
    }

    /// Names `loop` to read from now on, unless a loop is named already. Returns the loop
    /// that reads (or will), and whether the caller must start it now (no requester reads).
    mutating func choose(_ loop: ThreadLoop) -> (reader: ThreadLoop, startNow: Bool) {
        switch self {
        case .nobody:
            self = .loop(loop)
            return (loop, true)
        case .requester(nil):
            self = .requester(then: loop)
            return (loop, false)
        case .requester(let then?):
            return (then, false)
        case .loop(let chosen):
            return (chosen, false)
        }
    }

    /// The loop could not watch the connection: requesters read it again themselves.
    mutating func loopFailed() {
        self = .nobody
    }

    /// `loop` has ended (its thread stopped): true when it was the one reading, which now
    /// nobody does, until the caller names another loop. A loop named to take over from a
    /// requester is forgotten.
    mutating func loopEnded(_ loop: ThreadLoop) -> Bool {
        switch self {
        case .loop(let reading) where reading === loop:
            self = .nobody
            return true
        case .requester(let then?) where then === loop:
            self = .requester(then: nil)
            return false
        default:
            return false
        }
    }
}
