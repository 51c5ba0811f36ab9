// distributed-actors: a `distributed actor` on a permanent thread in one process, called
// by name from another, one call passing a file descriptor.
//
//   distributed-actors serve ADDRESS   registers a Librarian as "librarian" and serves
//   distributed-actors call ADDRESS    finds "librarian" and calls it
//   distributed-actors                 both: starts a name server inside itself, spawns
//                                      itself to serve, calls, and stops the server child
import Glibc
import PortActors

/// Prints a line at once (standard output may be a pipe).
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

/// What a librarian counts.
struct Shelf: Codable, Sendable {
    var books: [String]
}

/// A librarian: an actor whose serial executor is a permanent thread, so the thread and
/// the actor are one (what a Darwin worker thread with a run loop is, as an actor).
distributed actor Librarian {
    typealias ActorSystem = PortActorSystem

    let thread: PermanentThread
    private var shelf = Shelf(books: [])

    init(actorSystem: PortActorSystem, thread: PermanentThread) {
        self.actorSystem = actorSystem
        self.thread = thread
        actorSystem.run(id, on: thread)
    }

    /// Its thread, which the system keeps for it (a remote reference has no stored
    /// properties to read it from).
    nonisolated var unownedExecutor: UnownedSerialExecutor { actorSystem.executor(for: id) }

    /// Shelves a book; how many there are now.
    distributed func shelve(_ title: String) -> Int {
        shelf.books.append(title)
        return shelf.books.count
    }

    /// The shelf.
    distributed func catalogue() -> Shelf { shelf }

    /// Reads the book behind the descriptor (a file the caller opened), shelves its first
    /// line, and closes the descriptor (it is this process's own now).
    distributed func shelve(contentsOf book: TransferableDescriptor) throws -> String {
        defer { close(book.rawValue) }
        var bytes = [UInt8](repeating: 0, count: 1024)
        let count = pread(book.rawValue, &bytes, bytes.count, 0)
        guard count >= 0 else { throw LibraryError(reason: "cannot read the book: errno \(errno)") }
        let title = String(decoding: bytes[..<count], as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        shelf.books.append(title)
        return "\(title) (read on thread '\(thread.name)', pid \(getpid()))"
    }
}

/// An error that travels back to the caller as itself.
struct LibraryError: Error, Codable {
    var reason: String
}

func serve(_ address: String) async throws {
    let system = try PortActorSystem(nameServerAt: address)
    let thread = PermanentThread(name: "librarian")
    try thread.run()
    let librarian = Librarian(actorSystem: system, thread: thread)
    try await system.register(librarian, as: "librarian")
    say("serving librarian \(getpid())")
    // Serve until standard input ends (the caller closes it, or the terminal's ^D).
    while readLine() != nil {}
    system.shutDown()
}

func call(_ address: String) async throws {
    let system = try PortActorSystem(nameServerAt: address)
    defer { system.shutDown() }
    let librarian = try await system.resolve(name: "librarian", as: Librarian.self, waitingUpTo: .seconds(10))
    say("found \(librarian.id)")
    say("shelved: \(try await librarian.shelve("Dune")) book(s)")

    // A file descriptor as an argument: the other process reads the file through it.
    var template = Array("/tmp/distributed-actors-XXXXXX".utf8CString)
    let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    guard fd >= 0 else { throw LibraryError(reason: "mkstemp: errno \(errno)") }
    unlink(String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    let book = "Solaris\nby Stanisław Lem\n"
    _ = write(fd, book, book.utf8.count)
    say("shelved from a descriptor: \(try await librarian.shelve(contentsOf: TransferableDescriptor(fd)))")
    close(fd)
    say("catalogue: \(try await librarian.catalogue().books.joined(separator: ", "))")
}

/// Both halves: a name server in this process, the librarian in a child process.
func demo() async throws {
    let address = "/tmp/distributed-actors-\(getpid()).sock"
    let server = try NameServer.start(at: address)
    defer { server.stop() }
    var input: [CInt] = [0, 0]
    var output: [CInt] = [0, 0]
    // Close-on-exec, so that the child holds only the ends it is given (its input ends when ours closes).
    guard pipe(&input) == 0, pipe(&output) == 0 else { throw LibraryError(reason: "pipe: errno \(errno)") }
    for fd in input + output { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, input[0], 0)
    posix_spawn_file_actions_adddup2(&actions, output[1], 1)
    var pid: pid_t = 0
    let executable = CommandLine.arguments[0]
    let argv = [executable, "serve", address]
    var cArgv: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
    defer { for pointer in cArgv { free(pointer) } }
    guard posix_spawn(&pid, executable, &actions, nil, &cArgv, environ) == 0 else {
        throw LibraryError(reason: "cannot start the serving process")
    }
    close(input[0])
    close(output[1])
    // Its first line says it serves.
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while read(output[0], &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
    say("child: \(String(decoding: line, as: UTF8.self))")
    try await call(address)
    close(input[1])  // the child's standard input ends: it stops serving
    var status: CInt = 0
    waitpid(pid, &status, 0)
    close(output[0])
}

let arguments = Array(CommandLine.arguments.dropFirst())
do {
    switch (arguments.first, arguments.count) {
    case ("serve", 2): try await serve(arguments[1])
    case ("call", 2): try await call(arguments[1])
    case (nil, _): try await demo()
    default:
        say("usage: distributed-actors [serve ADDRESS | call ADDRESS]")
        exit(2)
    }
} catch {
    say("error: \(error)")
    exit(1)
}
