import CPortKitSystem

/// A reference that does not keep its object alive and reads as `nil` once the object's
/// deinit has begun, as a `weak` one does, but without giving the object a side table.
///
/// Why: the first `weak` reference to an object moves its reference counts to a side
/// table for the rest of its life, and every retain and release of it then takes the
/// runtime's slow path. A system and its actors are retained and released dozens of times
/// per served call (by the call's task, its decoder, its result handler), and a connection
/// on every request and reply, so what only needs to reach them while they live (a
/// system's port handler and table of actors, a connection's loop sources) refers to them
/// through this instead.
///
/// How: it holds an unowned reference count on the object, which keeps the object's memory
/// (not the object) allocated; the count lives in the object's header, like the strong
/// one. It reads the object with `swift_tryRetain`, which takes a strong reference unless
/// the object's deinit has begun: the check a weak load makes through the side table.
// Safety of @unchecked Sendable: `pointer` never changes; the runtime's reference counts
// it is used with are atomic, and the object is touched only through a strong reference
// `swift_tryRetain` took.
package final class Unretained<Object: AnyObject>: @unchecked Sendable {
    /// The object, unretained: never made a Swift reference unless a strong count was taken.
    private let pointer: UnsafeMutableRawPointer

    package init(_ object: Object) {
        pointer = Unmanaged.passUnretained(object).toOpaque()
        _ = swift_unownedRetain(pointer)
    }

    deinit {
        swift_unownedRelease(pointer)
    }

    /// The object, while it lives; `nil` once its deinit has begun.
    package var object: Object? {
        swift_tryRetain(pointer) == nil ? nil : Unmanaged<Object>.fromOpaque(pointer).takeRetainedValue()
    }
}
