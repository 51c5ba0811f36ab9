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

    /// The cluster drop-in lets the service speak TCP (the shipped units allow AF_UNIX
    /// only) and starts the daemon with the cluster's flags, each of which portnamed takes.
    @Test func theClusterDropInAllowsTCPAndRunsANode() throws {
        let dropIn = try text("Packaging/systemd/cluster.conf")
        let lines = dropIn.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") }
        let families = lines.filter { $0.hasPrefix("RestrictAddressFamilies=") }.joined(separator: " ")
        #expect(families.contains("AF_INET") && families.contains("AF_INET6") && !families.contains("~"), "\(families)")
        let starts = lines.filter { $0.hasPrefix("ExecStart=") }
        // An empty ExecStart= first clears the service's own.
        #expect(starts.count == 2 && starts[0] == "ExecStart=", "\(starts)")
        let command = starts.last.map { String($0.dropFirst("ExecStart=".count)) } ?? ""
        #expect(command.hasPrefix("/usr/local/bin/portnamed "), "\(command)")
        let daemonFlags = flags(try help(ChildProcessPaths.portnamed))
        let used = flags(command)
        #expect(used.isSuperset(of: ["--etcd", "--node", "--listen"]) && used.isSubset(of: daemonFlags), "\(command)")
        for scope in ["user", "system"] {
            #expect(try text("Packaging/systemd/\(scope)/portnamed.service").contains("RestrictAddressFamilies=AF_UNIX\n"))
        }
    }

    /// Every option of every verb, as `portname VERB --help` gives it, is completed for that
    /// verb: bash's completion run for real, zsh's read from the verb's `_arguments`, fish's `-l` lines.
    @Test(arguments: ["list", "lookup", "watch", "status", "serve", "send", "call", "monitor"])
    func eachVerbsOptionsAreCompletedForThatVerb(verb: String) throws {
        let usage = try help(ChildProcessPaths.portname, [verb, "--help"])
        let synopsis = try #require(usage.split(separator: "\n").first.map(String.init))
        let options = flags(synopsis).subtracting(["--address"]).union(["--help"])
        #expect(options.count > 1, "\(synopsis)")

        let script = """
            source "\(Self.root)/Packaging/completion/portname.bash"
            COMP_WORDS=(portname \(verb) --); COMP_CWORD=2; _portname
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let bash = try SpawnedProcess.spawn("/bin/bash", ["-c", script])
        let offered = Set(try bash.remainingLines(within: .seconds(60)))
        #expect(try bash.wait(within: .seconds(60)) == .exited(0))
        for option in options { #expect(offered.contains(option), "bash offers \(offered.sorted()) for \(verb), not \(option)") }

        let zsh = try text("Packaging/completion/_portname")
        let start = try #require(zsh.range(of: "        \(verb)) _arguments"), "_portname has no \(verb) case")
        let section = zsh[start.lowerBound...].prefix { $0 != ";" }
        for option in options { #expect(flags(String(section)).contains(option), "_portname's \(verb) lacks \(option)") }

        let fish = try text("Packaging/completion/portname.fish")
        for option in options { #expect(fish.contains("-l \(option.dropFirst(2))"), "portname.fish lacks \(option)") }
        #expect(fish.contains("-a \(verb) "), "portname.fish lacks \(verb)")
    }

    /// The page says how `--json` output reads (JSON Lines, with jq) and documents
    /// `portname help VERB`.
    @Test func thePageDocumentsJSONLinesAndHelpVerb() throws {
        let page = try text("docs/man/portname.1")
        #expect(page.contains("JSON Lines") && page.contains("| jq"))
        #expect(page.contains(".BI help \" VERB\""))
    }

    /// Rendered (mandoc), every shape in the JSON OUTPUT section is a JSON object once its
    /// placeholders are values: no quote is eaten by the markup.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/mandoc"), "needs mandoc (Debian mandoc)"))
    func theJSONShapesRenderAsJSON() throws {
        let mandoc = try SpawnedProcess.spawn("/usr/bin/mandoc", ["-T", "utf8", Self.root + "/docs/man/portname.1"])
        let rendered = try mandoc.remainingLines(within: .seconds(60))
        #expect(try mandoc.wait(within: .seconds(60)) == .exited(0))
        // Bold and italic are overstruck: drop "X\u{8}" pairs.
        let plain = rendered.map { $0.replacingOccurrences(of: ".\u{8}", with: "", options: .regularExpression) }
        let start = try #require(plain.firstIndex(of: "JSON OUTPUT"))
        let end = try #require(plain[start...].firstIndex(of: "OPTIONS"))
        // A shape is the lines from one starting with "{" to one ending with "}".
        var shapes: [String] = [], current: String?
        for line in plain[start..<end] {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if current == nil, trimmed.hasPrefix("{") { current = "" }
            guard current != nil else { continue }
            current! += trimmed + " "
            if trimmed.hasSuffix("}") {
                shapes.append(current!)
                current = nil
            }
        }
        #expect(shapes.count >= 9, "\(shapes)")
        let values = [
            "NAME": "\"n\"", "NODE": "\"n\"", "PATH": "\"/p\"", "TEXT": "\"t\"",
            "PID": "1", "UID": "1", "ID": "1", "N": "1", "SECONDS": "1.5",
            "GID": "1", "UNIT": "\"u\"", "BOOL": "true", "BASE64": "\"AA==\"", "KIND": "\"request\"",
        ]
        for shape in shapes {
            let json = shape.replacingOccurrences(of: "\\b[A-Z]+\\b", with: "$0", options: .regularExpression)
                .split(separator: " ", omittingEmptySubsequences: false)
                .map { word -> String in
                    let bare = word.trimmingCharacters(in: CharacterSet(charactersIn: ",}[]"))
                    guard let value = values[bare] else { return String(word) }
                    return word.replacingOccurrences(of: bare, with: value)
                }
                .joined(separator: " ")
            let parsed = try? JSONSerialization.jsonObject(with: Data(json.utf8))
            #expect(parsed is [String: Any], "the page renders \(shape), which is no JSON object")
        }
    }
}
