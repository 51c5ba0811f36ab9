/// Why a `PermanentThread.sync` or `submit` call failed: the thread did not run the block
/// (`thread`), or the block ran and threw (`body`).
///
/// The two stay apart so that a caller can tell "my work failed" from "my work never ran",
/// and both keep their types: a body that throws nothing makes `Failure` `Never`, and
/// only `thread` remains to match.
public enum ThreadCallError<Failure: Error>: Error, CustomStringConvertible {
    /// The thread did not run the block: `.stopped`, `.notStarted` (`sync` only), or
    /// `.cancelledBeforeStart` (`submit` only).
    case thread(PermanentThreadError)
    /// The block ran and threw this.
    case body(Failure)

    /// The thread's or the block's error, as it describes itself.
    public var description: String {
        switch self {
        case .thread(let error): "\(error)"
        case .body(let error): "\(error)"
        }
    }
}

extension ThreadCallError: Equatable where Failure: Equatable {}
extension ThreadCallError: Hashable where Failure: Hashable {}
