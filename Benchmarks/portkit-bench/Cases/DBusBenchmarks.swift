/// The `dbus` impls of the names cases: what a program using D-Bus, the system Linux
/// programs would otherwise pick, gets for the same job on a private bus started for the
/// impl (`DBusPeer`). The peer measures with libdbus's blocking calls, the way a libdbus
/// client makes them; its owner connection is served by a thread of the measuring process,
/// as PortKit's owner is by a loop thread, and the bus daemon is the server between them.
/// Without `dbus-daemon` or the peer (`scripts/bench-setup.sh`), each impl is left out with
/// the reason.
enum DBusBenchmarks {
    /// `names.lookup`/`dbus`: `GetNameOwner` on a kept connection to the bus for the name the
    /// owner connection holds. It hands back the owner's unique name, a string: a call to the
    /// owner still goes through the bus.
    static func lookup(count: Int) -> BenchmarkImpl {
        impl("lookup \(count)")
    }

    /// `names.call`/`dbus`: a method call carrying `size` bytes to the owner's name, through
    /// the bus, and its reply carrying them back.
    static func call(count: Int, size: Int) -> BenchmarkImpl {
        impl("call \(count) \(size)")
    }

    /// `names.death`/`dbus`: SIGKILL of a `/bin/sleep` holding the bus connection that owns
    /// a name (handed over as PortKit's impl hands over its name-server connection) until a
    /// watcher connection, subscribed to the name's `NameOwnerChanged`, sees it lose its owner.
    static func death(count: Int) -> BenchmarkImpl {
        impl("death \(count)")
    }

    private static func impl(_ command: String) -> BenchmarkImpl {
        BenchmarkImpl("dbus") {
            let peer = try DBusPeer()
            return .init(measure: { try peer.run(command) }, stop: peer.stop)
        }
    }
}
