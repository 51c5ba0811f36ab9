import Glibc
import PortMessaging

/// Owners' peer requirements: a lookup of a name whose owner declared one is answered only
/// to a looker that meets it.
extension NameService {
    /// Why `holder`'s requirement refuses `client`'s lookup; `nil` when it has none or the
    /// client meets it. An executable is read through the client's pidfd
    /// (`PortPeer.processHandle()`), taken only when a rule needs it.
    func refusal(of client: Client, by holder: Holder) -> String? {
        guard let requirement = holder.terms.requirement else { return nil }
        guard let credentials = client.peer.credentials else { return "its credentials are unknown" }
        return requirement.refusal(of: credentials, ownerUID: uid_t(holder.owner.uid)) { client.peer.processHandle() }
    }
}
