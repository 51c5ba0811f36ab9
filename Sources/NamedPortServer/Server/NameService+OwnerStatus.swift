import PermanentThread
import PortMessaging
import PortKitSystem

extension NameService {
    /// `nameStatus`: [name] → ok [`NameOwnerStatusFields`]: the owner's credentials (its
    /// connection's), its executable and control group as `/proc` tells this server, and
    /// the standbys queued behind it, in order.
    func answerNameStatus(_ fields: inout NameFieldReader, _ client: Client, _ pending: PendingReply) throws(NameServerError) {
        let name = try NameRules.decode(try fields.bytes()).get()
        guard let holder = table.holder(of: name) else { throw .notFound(name: name) }
        let pid = holder.owner.pid
        let status = NameOwnerStatus(
            owner: holder.owner, gid: clients[holder.client]?.peer.credentials?.gid ?? UInt32.max,
            executable: ProcessIdentity.executable(of: pid), controlGroup: ProcessIdentity.controlGroup(of: pid),
            isActivatable: isActivatable(name), standbys: table.standbys(of: name).map(\.owner))
        answer(pending, Message(id: NameStatus.ok.rawValue, components: NameOwnerStatusFields.encode(status)), client)
    }
}
