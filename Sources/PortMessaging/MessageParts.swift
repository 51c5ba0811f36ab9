/// A message's components as it stores them: the usual message of one component, as a
/// read or `Message(bytes:)` makes it, holds it directly, without an array, so that making,
/// sending and receiving it allocates one buffer (its bytes) rather than two. Iterated and
/// indexed like the array `Message.components` gives, without making one.
///
/// Two stored fields rather than an enum with payloads: reading a field of a borrowed value
/// retains nothing, where taking an enum's payload apart copies it (a retain and a release
/// of the array at every index).
struct MessageParts: RandomAccessCollection, Sendable {
    /// Whether `one` is the message's only component (a flag, not an optional: whether an
    /// optional of this multi-payload enum is empty is asked through its value witnesses).
    private var holdsOne: Bool
    /// The component of a message of exactly one held without an array (a placeholder
    /// otherwise).
    private var one: MessageComponent
    /// The components when they are not held in `one`: empty (no allocation) when they are.
    private(set) var others: [MessageComponent]

    init() {
        holdsOne = false
        one = .descriptor(-1)
        others = []
    }

    init(_ component: MessageComponent) {
        holdsOne = true
        one = component
        others = []
    }

    /// Parts of `components`, kept in that array whatever its count: a message made from
    /// another's `components` (an echo, a forward) then makes no array of its own.
    init(_ components: [MessageComponent]) {
        holdsOne = false
        one = .descriptor(-1)
        others = components
    }

    /// The components in an array (made here for a message of one).
    var array: [MessageComponent] { holdsOne ? [one] : others }

    /// Runs `body` on each component, in order: the hot paths' loop, which reads the
    /// stored fields directly rather than through the collection's indexing.
    @inline(__always)
    func forEachComponent<E: Error>(_ body: (MessageComponent) throws(E) -> Void) throws(E) {
        if holdsOne { return try body(one) }
        for component in others { try body(component) }
    }

    var startIndex: Int { 0 }

    var endIndex: Int { holdsOne ? 1 : others.count }

    subscript(position: Int) -> MessageComponent {
        get {
            if holdsOne {
                precondition(position == 0, "component index \(position) out of range")
                return one
            }
            return others[position]
        }
        set {
            if holdsOne {
                precondition(position == 0, "component index \(position) out of range")
                one = newValue
            } else {
                others[position] = newValue
            }
        }
    }
}
