import PortMessaging

/// What the name server knows of a name's owner (`NameServerClient.blockingStatus(of:)`,
/// `portname status NAME`): its credentials, and what `/proc` says of its process.
public struct NameOwnerStatus: Hashable, Sendable {
    /// The name and its owner's pid and uid.
    public var owner: NameOwner
    /// The owner's group id (SO_PEERCRED of its connection).
    public var gid: UInt32
    /// The executable the owner runs (`/proc/PID/exe`); `nil` where the server may not read it.
    public var executable: String?
    /// The owner's control group (the unified hierarchy's path in `/proc/PID/cgroup`);
    /// `nil` where the server cannot read it.
    public var controlGroup: String?
    /// Whether the name is activatable (started on demand), when the server says; `nil`
    /// from a server that does not report it.
    public var isActivatable: Bool?
    /// The registrations queued behind the owner to take the name when it goes, in order,
    /// when the server says; `nil` from a server that does not report them.
    public var standbys: [NameOwner]?

    /// Makes a status record.
    public init(
        owner: NameOwner, gid: UInt32, executable: String? = nil, controlGroup: String? = nil, isActivatable: Bool? = nil,
        standbys: [NameOwner]? = nil
    ) {
        self.owner = owner
        self.gid = gid
        self.executable = executable
        self.controlGroup = controlGroup
        self.isActivatable = isActivatable
        self.standbys = standbys
    }

    /// The systemd unit the owner runs in: the last `*.service` of its control group's
    /// path (`/system.slice/db.service` → `db.service`); `nil` outside one.
    public var systemdUnit: String? {
        controlGroup?.split(separator: "/").last { $0.hasSuffix(".service") }.map(String.init)
    }
}

/// The reply's fields: [pid, uid, gid, executable, cgroup] (an empty string where unknown),
/// then optional fields a server adds at the end, each readable alone by a client that
/// knows it and ignored by one that does not: [activatable (0 or 1)], [standbys (owners)].
enum NameOwnerStatusFields {
    static func encode(_ status: NameOwnerStatus) -> [MessageComponent] {
        var fields = [
            NameField.integer(status.owner.pid), NameField.integer(status.owner.uid), NameField.integer(status.gid),
            NameField.string(status.executable ?? ""), NameField.string(status.controlGroup ?? ""),
        ]
        guard status.isActivatable != nil || status.standbys != nil else { return fields }
        fields.append(NameField.integer(UInt64(status.isActivatable == true ? 1 : 0)))
        if let standbys = status.standbys { fields.append(NameField.owners(standbys)) }
        return fields
    }

    static func decode(_ name: String, _ fields: inout NameFieldReader) throws(NameServerError) -> NameOwnerStatus {
        let owner = try fields.owner(named: name)
        let gid = try fields.uid()
        let executable = try fields.string()
        let controlGroup = try fields.string()
        var status = NameOwnerStatus(
            owner: owner, gid: gid, executable: executable.isEmpty ? nil : executable,
            controlGroup: controlGroup.isEmpty ? nil : controlGroup)
        if !fields.atEnd { status.isActivatable = try fields.integer() != 0 }
        if !fields.atEnd { status.standbys = try fields.owners() }
        return status
    }
}
