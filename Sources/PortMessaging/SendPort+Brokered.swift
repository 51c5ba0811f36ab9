import PermanentThread

extension SendPort {
    /// A connection of its own to this port's receive port, made as a port component's is
    /// when it travels (a socket pair, one end handed to the receiving side): for a relay
    /// in this process that must reach the receiver over a connection nobody else uses.
    /// - Throws: `.invalidPort`, `.peerDied`; `.system` when no socket pair can be made.
    package func brokeredConnection() throws(PortError) -> SendPort {
        let (end, handOff) = try transferableEnd()
        handOff?(true)
        return SendPort(adoptingSocket: end)
    }
}
