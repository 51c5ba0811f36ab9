// The Swift runtime's reference-counting entry points that PortKitLocks' Unretained uses: a
// reference that does not keep its object alive, read as a weak one is, without the side
// table a weak reference gives the object. Exported by the Swift runtime (libswiftCore),
// declared as its HeapObject.h declares them (a C declaration, not @_silgen_name: the
// compiler reserves these names).
#ifndef PORTKIT_RUNTIME_H
#define PORTKIT_RUNTIME_H

/// Adds an unowned reference to object (its memory stays allocated); returns object.
void *swift_unownedRetain(void *object);

/// Drops an unowned reference to object: its memory is freed with the last one.
void swift_unownedRelease(void *object);

/// Adds a strong reference to object unless its deinit has begun: object, else NULL.
void *swift_tryRetain(void *object);

#endif
