import PortMessaging

// A register's optional fields after its scope (docs/NAMES.md, "Standbys" and "Peer
// requirements"): the terms, the owner's peer requirement, and a notice port. A client
// sends them only when one is not the default, so a plain register is the frame it always
// was; a server that predates them reads the scope and ignores the rest (it answers
// `nameTaken` for a queued register).

/// What a register asks besides the name and the port: what to do if the name is taken,
/// whether others may replace this owner, and whom lookups must come from.
struct RegisterTerms: Sendable {
    var ifTaken: TakenNamePolicy = .fail
    var replaceable = false
    var requirement: PeerRequirement?

    /// Whether the registration needs a notice port: to be told that it took the name over
    /// (queued), or that another connection replaced it.
    var wantsNotices: Bool { ifTaken == .queue || replaceable }

    /// Whether the register is the plain one (no field after the scope).
    var isPlain: Bool { ifTaken == .fail && !replaceable && requirement == nil }

    /// The terms field: the policy in bits 0–1, replaceable as bit 2.
    var flags: UInt64 { ifTaken.rawValue | (replaceable ? 4 : 0) }

    init(ifTaken: TakenNamePolicy = .fail, replaceable: Bool = false, requirement: PeerRequirement? = nil) {
        self.ifTaken = ifTaken
        self.replaceable = replaceable
        self.requirement = requirement
    }

    /// Terms from the field; a protocol error for a policy this server does not know.
    init(flags: UInt64, requirement: PeerRequirement?) throws(NameServerError) {
        guard let policy = TakenNamePolicy(rawValue: flags & 3), flags & ~7 == 0 else {
            throw .protocolError("unknown register terms \(flags)")
        }
        self.init(ifTaken: policy, replaceable: flags & 4 != 0, requirement: requirement)
    }
}

/// A peer requirement on the wire: per rule a tag byte, then for uids (1) and gids (2) a
/// count and the ids (4 bytes little endian each), for same user (3) nothing, for an
/// executable (4) the path's length (2 bytes little endian) and its UTF-8. A predicate
/// cannot travel. An empty field is no requirement.
enum RequirementField {
    static func encode(_ requirement: PeerRequirement?) throws(NameServerError) -> MessageComponent {
        guard let requirement else { return .data([]) }
        var bytes: [UInt8] = []
        func append32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        for rule in requirement.rules {
            switch rule {
            case .uids(let ids), .gids(let ids):
                if case .uids = rule { bytes.append(1) } else { bytes.append(2) }
                append32(UInt32(ids.count))
                for id in ids.sorted() { append32(id) }
            case .sameUser:
                bytes.append(3)
            case .executable(let path):
                let utf8 = Array(path.utf8.prefix(Int(UInt16.max)))
                bytes.append(4)
                withUnsafeBytes(of: UInt16(utf8.count).littleEndian) { bytes.append(contentsOf: $0) }
                bytes.append(contentsOf: utf8)
            case .predicate:
                throw .requirementCannotTravel(requirement: requirement.description)
            }
        }
        return .data(bytes)
    }

    static func decode(_ bytes: [UInt8]) throws(NameServerError) -> PeerRequirement? {
        guard !bytes.isEmpty else { return nil }
        var rules: [PeerRequirement.Rule] = []
        var at = 0
        func take(_ count: Int) throws(NameServerError) -> ArraySlice<UInt8> {
            guard count >= 0, at + count <= bytes.count else { throw .protocolError("a malformed peer requirement") }
            defer { at += count }
            return bytes[at..<(at + count)]
        }
        func integer(_ count: Int) throws(NameServerError) -> UInt32 {
            try take(count).reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        }
        while at < bytes.count {
            switch try take(1).first {
            case 1, 2:
                let tag = bytes[at - 1]
                let count = Int(try integer(4))
                guard count <= bytes.count / 4 else { throw .protocolError("a malformed peer requirement") }
                var ids = Set<UInt32>()
                for _ in 0..<count { ids.insert(try integer(4)) }
                rules.append(tag == 1 ? .uids(ids) : .gids(ids))
            case 3:
                rules.append(.sameUser)
            case 4:
                let length = Int(try integer(2))
                rules.append(.executable(String(decoding: try take(length), as: UTF8.self)))
            default:
                throw .protocolError("an unknown peer requirement rule")
            }
        }
        return PeerRequirement(rules: rules)
    }
}
