import Foundation
import NamedPortServer
import PortKitTestSupport
import Testing

/// The manual pages, the completions and the commands' own help name the same verbs and
/// flags: a flag added to one and forgotten in another fails here.
@Suite("Manual pages and completions follow the commands")
struct OperatorDocsTests {
    /// The repository's root, from this file's place in it.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    private func text(_ path: String) throws -> String {
        try String(contentsOfFile: Self.root + "/" + path, encoding: .utf8)
    }

    /// What `executable --help` prints.
    private func help(_ executable: String, _ arguments: [String] = ["--help"]) throws -> String {
        let child = try SpawnedProcess.spawn(executable, arguments)
        let lines = try child.remainingLines(within: .seconds(60))
        #expect(try child.wait(within: .seconds(60)) == .exited(0))
        return lines.joined(separator: "\n")
    }

    /// The `--flags` a text names (roff escapes its dashes as `\-`).
    private func flags(_ text: String) -> Set<String> {
        let plain = text.replacingOccurrences(of: "\\-", with: "-")
        var found: Set<String> = []
        var rest = plain[...]
        while let range = rest.range(of: "--") {
            let tail = rest[range.upperBound...]
            let name = tail.prefix { $0.isLetter || $0 == "-" }
            if !name.isEmpty, name.first!.isLetter { found.insert("--" + name) }
            rest = tail
        }
        return found
    }

    @Test func portnamedsFlagsAreInItsManualPageAndCompletions() throws {
        let daemonFlags = flags(try help(ChildProcessPaths.portnamed))
        #expect(daemonFlags.isSuperset(of: ["--address", "--socket-mode", "--allow-uid", "--log-level", "--version"]))
        let page = flags(try text("docs/man/portnamed.8"))
        let bash = flags(try text("Packaging/completion/portname.bash"))
        let zsh = flags(try text("Packaging/completion/_portname"))
        for flag in daemonFlags {
            #expect(page.contains(flag), "portnamed.8 lacks \(flag)")
            #expect(bash.contains(flag), "portname.bash lacks \(flag)")
            #expect(zsh.contains(flag), "_portname lacks \(flag)")
        }
    }

    @Test func portnamesVerbsAndFlagsAreInItsManualPageAndCompletions() throws {
        let usage = try help(ChildProcessPaths.portname)
        let page = try text("docs/man/portname.1")
        let bash = try text("Packaging/completion/portname.bash")
        let zsh = try text("Packaging/completion/_portname")
        for verb in ["list", "lookup", "watch", "status", "serve", "send"] {
            #expect(usage.contains("] \(verb)"), "portname --help lacks \(verb)")
            #expect(page.contains(".B \(verb)") || page.contains(".BI \(verb)") || page.contains(".BR \(verb)"),
                    "portname.1 lacks \(verb)")
            #expect(bash.contains(verb) && zsh.contains("'\(verb):"), "a completion lacks \(verb)")
        }
        for flag in flags(usage) {
            #expect(flags(page).contains(flag), "portname.1 lacks \(flag)")
            #expect(flags(bash).contains(flag), "portname.bash lacks \(flag)")
            #expect(flags(zsh).contains(flag), "_portname lacks \(flag)")
        }
    }

    @Test func theManualPagesCarryTheCommandsVersion() throws {
        let version = NamedPortServerModule.version
        #expect(try text("docs/man/portname.1").contains("\"PortKit \(version)\""))
        #expect(try text("docs/man/portnamed.8").contains("\"PortKit \(version)\""))
        #expect(try text("CHANGELOG.md").contains("(\(version))"))
    }

    @Test func theUnitsPointAtTheManualPageAndAskForReadiness() throws {
        for scope in ["user", "system"] {
            let service = try text("Packaging/systemd/\(scope)/portnamed.service")
            let socket = try text("Packaging/systemd/\(scope)/portnamed.socket")
            #expect(service.contains("Type=notify") && service.contains("Documentation=man:portnamed(8)"))
            #expect(socket.contains("SocketMode=0600") && socket.contains("Documentation=man:portnamed(8)"))
        }
        #expect(try text("Packaging/systemd/user/portnamed.socket").contains("ListenStream=%t/portkit/names.sock"))
    }
}
