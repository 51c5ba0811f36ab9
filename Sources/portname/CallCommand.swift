import Glibc
import NamedPortServer
import PermanentThread
import PortKitSystem

/// `call` (and `send`, its text-only form): a message to a named port, with bytes from an
/// argument, a file or the standard input, descriptors, as a request or one-way.
enum CallCommand {
    /// What to send, and how.
    struct Call {
        var name: String
        var id: UInt32 = 0
        var payload: [UInt8] = []
        /// Paths opened and sent as descriptor components, after the bytes.
        var descriptorPaths: [String] = []
        var oneWay = false
        var timeout: Duration = .seconds(10)
    }

    /// How the reply is printed: `send`'s text line, or `call`'s bytes.
    enum Output {
        case text, bytes
    }

    static func run(_ options: Options, address: String?) throws(Exit) {
        guard options.positional.count == 1 else { throw .usage("call takes one NAME", verb: .call) }
        var call = try common(options, verb: .call)
        let text = options.values["--text"]
        let file = options.values["--bytes"]
        guard text == nil || file == nil else { throw .usage("--text and --bytes exclude each other", verb: .call) }
        if let text { call.payload = Array(text.utf8) }
        if let file { call.payload = try readAll(file) }
        call.descriptorPaths = options.repeated["--fd"] ?? []
        call.oneWay = options.flags.contains("--oneway")
        try perform(call, output: .bytes, json: options.wantsJSON, address: address)
    }

    /// `send NAME [TEXT]`: `call NAME --text TEXT`, its reply printed as a line of text.
    static func send(_ options: Options, address: String?) throws(Exit) {
        guard (1...2).contains(options.positional.count) else {
            throw .usage("send takes NAME and at most one TEXT", verb: .send)
        }
        var call = try common(options, verb: .send)
        call.payload = options.positional.count > 1 ? Array(options.positional[1].utf8) : []
        try perform(call, output: .text, json: options.wantsJSON, address: address)
    }

    /// The name, `--id` and `--timeout`, which `call` and `send` share.
    private static func common(_ options: Options, verb: Verb) throws(Exit) -> Call {
        var call = Call(name: try validName(options.positional[0]))
        if let text = options.values["--id"] {
            guard let id = UInt32(text) else { throw .usage("--id needs a number from 0 to \(UInt32.max)", verb: verb) }
            call.id = id
        }
        call.timeout = try options.seconds("--timeout", verb: verb) ?? .seconds(10)
        return call
    }

    /// Looks the name up, sends, and prints the reply (nothing for a one-way send).
    static func perform(_ call: Call, output: Output, json: Bool, address: String?) throws(Exit) {
        let descriptors = try open(call.descriptorPaths)
        defer { FileDescriptor.close(descriptors) }
        let client = try connect(address)
        let port: SendPort
        do {
            port = try client.blockingLookup(call.name)
        } catch {
            throw Exit(error)
        }
        defer { port.invalidate() }
        let message = Message(id: call.id, components: [.data(call.payload)] + descriptors.map { .descriptor($0) })
        do {
            if call.oneWay {
                try port.send(message, timeout: call.timeout)
                if json { say(sentLine(call)) }
                return
            }
            let reply = try port.blockingRequest(message, sendTimeout: call.timeout, receiveTimeout: call.timeout)
            FileDescriptor.close(reply.descriptors)
            show(reply, of: call, output: output, json: json)
        } catch {
            throw Exit(error, name: call.name)
        }
    }

    /// The reply: `send`'s line of text, `call`'s bytes as they are; with --json one line.
    private static func show(_ reply: Message, of call: Call, output: Output, json: Bool) {
        switch (output, json) {
        case (.text, false):
            say(String(decoding: reply.bytes, as: UTF8.self))
        case (.text, true):
            var line = JSONLine()
            line.add("name", call.name)
            line.add("id", Int(reply.id))
            line.add("reply", String(decoding: reply.bytes, as: UTF8.self))
            say(line.text)
        case (.bytes, false):
            let bytes = reply.bytes
            _ = bytes.withUnsafeBytes { try? FileDescriptor(rawValue: STDOUT_FILENO).writeAll($0) }
        case (.bytes, true):
            var line = JSONLine()
            line.add("name", call.name)
            line.add("id", Int(reply.id))
            line.add("size", reply.bytes.count)
            line.add("bytes", base64(reply.bytes))
            line.add("components", reply.components.count)
            line.add("descriptors", reply.descriptors.count)
            say(line.text)
        }
    }

    /// `call --oneway --json`: `{"name": NAME, "id": ID, "sent": SIZE}`.
    private static func sentLine(_ call: Call) -> String {
        var line = JSONLine()
        line.add("name", call.name)
        line.add("id", Int(call.id))
        line.add("sent", call.payload.count)
        return line.text
    }

    // MARK: Input

    /// The bytes of `path`, or of the standard input for `-`.
    private static func readAll(_ path: String) throws(Exit) -> [UInt8] {
        let input = path == "-" ? FileDescriptor(rawValue: STDIN_FILENO) : try open(path, flags: O_RDONLY)
        defer { if path != "-" { try? input.close() } }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count: Int
            do { count = try chunk.withUnsafeMutableBytes { (buffer) throws(Errno) in try input.read(into: buffer) } } catch {
                throw Exit(status: 1, message: "cannot read '\(path)': \(error)")
            }
            if count == 0 { return bytes }
            bytes += chunk[..<count]
        }
    }

    /// Opens each of `paths` to send: read-write where it may be, else read-only.
    private static func open(_ paths: [String]) throws(Exit) -> [CInt] {
        var opened: [CInt] = []
        for path in paths {
            if let descriptor = try? open(path, flags: O_RDWR) {
                opened.append(descriptor.rawValue)
                continue
            }
            do {
                opened.append(try open(path, flags: O_RDONLY).rawValue)
            } catch {
                FileDescriptor.close(opened)
                throw error
            }
        }
        return opened
    }

    private static func open(_ path: String, flags: CInt) throws(Exit) -> FileDescriptor {
        do {
            return try FileDescriptor.open(path, flags: flags | O_CLOEXEC)
        } catch {
            throw Exit(status: 1, message: "cannot open '\(path)': \(error)")
        }
    }

    /// `bytes` in base64 (RFC 4648, with padding).
    static func base64(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        for start in stride(from: 0, to: bytes.count, by: 3) {
            let chunk = bytes[start..<min(start + 3, bytes.count)]
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * UInt32($1.offset)) }
            for index in 0..<4 {
                out.append(index <= chunk.count ? alphabet[Int(value >> (18 - 6 * UInt32(index)) & 63)] : UInt8(ascii: "="))
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
