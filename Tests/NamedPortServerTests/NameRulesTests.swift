import Glibc
@testable import NamedPortServer
import PortMessaging
import Testing

@Suite("Names: rules, protocol fields, addresses")
struct NameRulesTests {
    @Test(arguments: [
        ("db", nil),
        ("com.example.worker-1", nil),
        ("naïve☃name", nil),
        ("naïve ☃ name", .whitespace),
        ("two words", .whitespace),
        ("no\u{A0}break", .whitespace),
        ("ideographic\u{3000}space", .whitespace),
        ("line\u{2028}separator", .whitespace),
        ("c1\u{85}control", .controlCharacter),
        (String(repeating: "x", count: 255), nil),
        ("", NameServerError.InvalidNameReason.empty),
        (String(repeating: "x", count: 256), .tooLong(bytes: 256)),
        (String(repeating: "é", count: 128), .tooLong(bytes: 256)),
        ("a/b", .slash),
        ("tab\there", .controlCharacter),
        ("nul\u{0}", .controlCharacter),
        ("del\u{7F}", .controlCharacter),
        ("line\n", .controlCharacter),
    ] as [(String, NameServerError.InvalidNameReason?)])
    func nameValidation(name: String, expected: NameServerError.InvalidNameReason?) {
        let outcome = Result { () throws(NameServerError) in try NameRules.validate(name) }
        switch (outcome, expected) {
        case (.success, nil): break
        case (.failure(let error), let reason?): #expect(error == .invalidName(name: name, reason: reason))
        default: Issue.record("\(name.debugDescription): got \(outcome), expected \(String(describing: expected))")
        }
    }

    @Test func prefixMayBeEmptyButFollowsTheOtherRules() throws {
        try NameRules.validatePrefix("")
        try NameRules.validatePrefix("svc.")
        #expect(throws: NameServerError.invalidName(name: "a/", reason: .slash)) { try NameRules.validatePrefix("a/") }
    }

    @Test func bytesThatAreNotUTF8AreRefused() {
        let decoded = NameRules.decode([0x61, 0xFF, 0x62])
        guard case .failure(.invalidName(_, .notUTF8)) = decoded else {
            Issue.record("got \(decoded)")
            return
        }
    }

    /// Every refusal travels from server to client as a reply status and comes back equal.
    @Test(arguments: [
        NameServerError.nameTaken(name: "db", ownerPID: 4242),
        .nameTakenElsewhere(name: "db", node: "east-1", ownerPID: 4242),
        .notFound(name: "db"),
        .waitTimedOut(operation: "waiting for 'db'"),
        .permissionDenied(reason: "uid 65534 may not"),
        .invalidName(name: "a/b", reason: .slash),
        .invalidName(name: "", reason: .empty),
        .invalidName(name: "xx", reason: .tooLong(bytes: 300)),
        .invalidName(name: "\u{1}", reason: .controlCharacter),
        .invalidName(name: "a b", reason: .whitespace),
        .notOwner(name: "db", ownerPID: 7),
        .limitExceeded(what: "names per connection", limit: 256),
        .serverBusy(address: "/run/names.sock", reason: "out of descriptors"),
    ])
    func errorsRoundTripThroughReplies(error: NameServerError) {
        let reply = NameReply.encode(error)
        #expect(reply.id != NameStatus.ok.rawValue)
        #expect(NameReply.decode(status: reply.id, reply.components, address: "/run/names.sock") == error)
    }

    @Test func garbledReplyFieldsAreAProtocolErrorNotATrap() {
        let decoded = NameReply.decode(status: NameStatus.nameTaken.rawValue, [.data([1, 2])], address: "/a")
        guard case .protocolError = decoded else {
            Issue.record("got \(decoded)")
            return
        }
        guard case .protocolError = NameReply.decode(status: 999, [], address: "/a") else {
            Issue.record("an unknown status must be a protocol error")
            return
        }
    }

    @Test func integerFieldsAreEightBytesLittleEndian() throws {
        guard case .data(let bytes) = NameField.integer(UInt64(0x0102_0304_0506_0708)) else {
            Issue.record("not a bytes component")
            return
        }
        #expect(bytes == [8, 7, 6, 5, 4, 3, 2, 1])
        var reader = NameFieldReader([NameField.integer(Int32(-1)), NameField.string("x")])
        #expect(try reader.pid() == -1)
        #expect(try reader.string() == "x")
        #expect(reader.atEnd)
        #expect(throws: NameServerError.self) { try reader.integer() }
    }

    @Test func ownerListsPackIntoOneFieldAndAGarbledOneIsAProtocolError() throws {
        let owners = [
            NameOwner(name: "a", pid: 1, uid: 1000), NameOwner(name: String(repeating: "n", count: 255), pid: -1, uid: 0),
            NameOwner(name: "naïve☃", pid: 77, uid: UInt32.max),
        ]
        let field = NameField.owners(owners)
        var reader = NameFieldReader([field])
        #expect(try reader.owners() == owners)
        #expect(reader.atEnd)
        guard case .data(let bytes) = field else {
            Issue.record("not a bytes component")
            return
        }
        for cut in [1, 5, bytes.count - 1] {
            var truncated = NameFieldReader([.data(Array(bytes.prefix(cut)))])
            #expect(throws: NameServerError.self) { try truncated.owners() }
        }
        var empty = NameFieldReader([NameField.owners([])])
        #expect(try empty.owners().isEmpty)
    }

    @Test(arguments: [
        ([:], UInt32(1000), "/tmp/portkit-1000/names.sock"),
        (["XDG_RUNTIME_DIR": "/run/user/1000"], 1000, "/run/user/1000/portkit/names.sock"),
        (["XDG_RUNTIME_DIR": "/run/user/1000/"], 1000, "/run/user/1000/portkit/names.sock"),
        (["XDG_RUNTIME_DIR": "relative/dir"], 7, "/tmp/portkit-7/names.sock"),
        (["XDG_RUNTIME_DIR": "/run/user/0", "PORTKIT_NAME_SERVER": "/srv/names.sock"], 0, "/srv/names.sock"),
        (["PORTKIT_NAME_SERVER": ""], 5, "/tmp/portkit-5/names.sock"),
    ] as [([String: String], UInt32, String)])
    func defaultAddress(environment: [String: String], uid: UInt32, expected: String) {
        #expect(NameServerAddress.defaultAddress(environment: { environment[$0] }, uid: uid_t(uid)) == expected)
    }

    @Test func anExplicitAddressWins() {
        #expect(NameServerAddress.resolve("/x/y.sock") == "/x/y.sock")
        #expect(NameServerAddress.resolve(nil) == NameServerAddress.default)
        #expect(NameServerAddress.resolve("") == NameServerAddress.default)
    }

    @Test func unavailableServerSaysWhereAndHowToStartOne() {
        let text = NameServerError.serverUnavailable(address: "/tmp/x/names.sock", reason: "no socket file").description
        #expect(text.contains("/tmp/x/names.sock"))
        #expect(text.contains("portnamed --address /tmp/x/names.sock"))
        // Written for a shell user: a command to run, no Swift call.
        #expect(!text.contains("NameServer"))
    }
}
