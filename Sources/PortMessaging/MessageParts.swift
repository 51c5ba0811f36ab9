/// A message's components as it stores them: the usual message of one component (or none)
/// holds it directly, without an array, so that making, sending and receiving it allocates
/// one buffer (its bytes) rather than two. Iterated like the array `Message.components`
/// gives, without making one.
struct MessageParts: RandomAccessCollection, Sendable {
    private enum Storage: Sendable {
        case none
        case one(MessageComponent)
        /// Two or more.
        case many([MessageComponent])
    }

    private var storage: Storage

    init() { storage = .none }

    init(_ component: MessageComponent) { storage = .one(component) }

    init(_ components: [MessageComponent]) {
        switch components.count {
        case 0: storage = .none
        case 1: storage = .one(components[0])
        default: storage = .many(components)
        }
    }

    /// The components in an array (made here for one component).
    var array: [MessageComponent] {
        switch storage {
        case .none: []
        case .one(let component): [component]
        case .many(let components): components
        }
    }

    var startIndex: Int { 0 }

    var endIndex: Int {
        switch storage {
        case .none: 0
        case .one: 1
        case .many(let components): components.count
        }
    }

    subscript(position: Int) -> MessageComponent {
        get {
            switch storage {
            case .one(let component) where position == 0: return component
            case .many(let components): return components[position]
            default: preconditionFailure("component index \(position) out of range")
            }
        }
        set {
            switch storage {
            case .one where position == 0:
                storage = .one(newValue)
            case .many(var components):
                storage = .none  // the array is let go first, so the write below copies nothing
                components[position] = newValue
                storage = .many(components)
            default:
                preconditionFailure("component index \(position) out of range")
            }
        }
    }
}
