import Glibc
import PermanentThread
import PortKitSystem

/// Whom a client accepts as its name server, checked before it sends a byte.
///
/// In `/tmp` another user can make the default directory first and listen there; it would
/// then read what the client sends and be handed connections into its ports. So a
/// client refuses (`untrustedServer`):
/// - a default-address directory (`NameServerAddress.defaultDirectory`) that is not a real
///   directory, or is owned by another user than this one, root or a trusted user, or that
///   its group or others may write to;
/// - a server whose process (SO_PEERCRED of the connected socket) runs as another user
///   than this one, root or a trusted user.
struct ServerTrust {
    let address: String
    /// Users besides this one and root whose servers the caller accepts.
    let trustedUsers: Set<UInt32>
    private let me = UInt32(geteuid())

    init(address: String, trustedUsers: Set<UInt32>) {
        self.address = address
        self.trustedUsers = trustedUsers
    }

    /// Whether a server or directory of `uid` is acceptable.
    func trusts(_ uid: UInt32) -> Bool { uid == me || uid == 0 || trustedUsers.contains(uid) }

    /// Checks the default directory, if the address is in it; any other path is the
    /// caller's choice. A missing directory is left to `connect` to report.
    func checkDirectory() throws(NameServerError) {
        let directory = NameServerAddress.directory(of: address)
        guard directory == NameServerAddress.defaultDirectory else { return }
        let status: FileSystem.Status
        do {
            status = try FileSystem.status(directory)
        } catch {
            return
        }
        let owner = UInt32(status.owner)
        guard status.isDirectory else {
            throw .untrustedServer(
                address: address, ownerUID: owner, reason: "its directory \(directory) is not a directory (a symbolic link is not accepted)")
        }
        guard trusts(owner) else {
            throw .untrustedServer(
                address: address, ownerUID: owner, reason: "its directory \(directory) belongs to uid \(owner), not to this user (uid \(me))")
        }
        guard status.permissions & 0o022 == 0 else {
            throw .untrustedServer(
                address: address, ownerUID: owner,
                reason: "its directory \(directory) has mode 0\(String(status.permissions, radix: 8)): others may write to it")
        }
    }

    /// Checks who listens at the address: `uid` is the listening process's user
    /// (SO_PEERCRED of the connection).
    func checkServer(uid: UInt32) throws(NameServerError) {
        guard trusts(uid) else {
            throw .untrustedServer(
                address: address, ownerUID: uid,
                reason: "its process runs as uid \(uid), neither this user (uid \(me)) nor root nor a trusted user")
        }
    }
}
