import PermanentThread
import PortMessaging

extension NameService {
    /// `nameStatus`: [name] → ok [`NameOwnerStatusFields`]: the owner's credentials (its
    /// connection's), its executable and control group as `/proc` tells this server.
    func answerNameStatus(_ fields: inout NameFieldReader, _ client: Client, _ pending: PendingReply) throws(NameServerError) {
        let name = try NameRules.decode(try fields.bytes()).get()
        guard let holder = table.holder(of: name) else { throw .notFound(name: name) }
        let pid = holder.owner.pid
        var status = NameOwnerStatus(
            owner: holder.owner, gid: clients[holder.client]?.peer.credentials?.gid ?? UInt32.max,
            executable: ProcessIdentity.executable(of: pid), controlGroup: ProcessIdentity.controlGroup(of: pid))
        // Said only by a server that activates (one with service directories).
        if !policy.serviceDirectories.isEmpty { status.isActivatable = isActivatable(name) }
        answer(pending, Message(id: NameStatus.ok.rawValue, components: NameOwnerStatusFields.encode(status)), client)
    }
}
