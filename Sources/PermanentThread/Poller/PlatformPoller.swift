#if os(Linux)
/// The poller backend of this platform: the one place that names it. Run loops use this
/// concrete type, so their calls into the poller are direct, not through an existential.
package typealias PlatformPoller = EpollPoller
#else
#error("PortKit has no poller backend for this platform: add one that implements Poller")
#endif
