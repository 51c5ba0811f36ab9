import Foundation

/// The `foundation` impls of the process benchmarks: Foundation's `SocketPort` over TCP on
/// loopback, run in child processes so that its failures (TOOLCHAIN.md: it drops messages
/// under 12 bytes, never transmits the reply port, crashes on back-to-back messages) cannot
/// take the harness down.
///
/// The harness starts a driver (`--child socketport-driver MODE`), which starts its peer
/// (`--child socketport-peer`). Both listen on a SocketPort of their own; since a reply
/// port never arrives, each sends to the other's listening port, learnt out of band. The
/// harness writes `run COUNT SIZE` lines to the driver; the driver answers each with
/// `ok SECONDS` (the median round trip for `roundtrip`, the whole batch for `oneway`) or
/// `fail WHY`.
enum SocketPortChildren {
    /// What the driver measures.
    enum Mode: String {
        /// One message at a time, each echoed before the next goes.
        case roundtrip
        /// A batch sent back to back; the peer acknowledges once it has the whole batch.
        case oneway
    }

    /// How long the driver waits for any one answer of its peer.
    static let answerTimeout: TimeInterval = 5

    /// `socketport-driver MODE`: the measuring side.
    static func driver(_ arguments: [String]) -> Int32 {
        guard let mode = arguments.first.flatMap(Mode.init(rawValue:)) else {
            printError("socketport-driver: usage: socketport-driver roundtrip|oneway")
            return 2
        }
        guard let local = SocketPort(tcpPort: 0) else { return answer("fail SocketPort(tcpPort: 0) returned nil") }
        let inbox = Inbox()
        local.setDelegate(inbox)
        RunLoop.current.add(local, forMode: .default)

        let peer = Process()
        let peerOutput = Pipe()
        peer.executableURL = URL(fileURLWithPath: BenchProcess.executable)
        peer.arguments = ["--child", "socketport-peer", String(listeningPort(local)), mode.rawValue]
        peer.standardOutput = peerOutput
        // A crash of the peer is a finding, reported in one line; its backtrace is not.
        peer.standardError = FileHandle.nullDevice
        peer.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
        do { try peer.run() } catch { return answer("fail cannot start the peer: \(error)") }
        defer { if peer.isRunning { peer.terminate() } }
        guard let line = String(data: peerOutput.fileHandleForReading.availableData, encoding: .utf8),
              let peerPort = line.split(separator: " ").last.flatMap({ UInt16($0.trimmingCharacters(in: .whitespacesAndNewlines)) }),
              let remote = SocketPort(remoteWithTCPPort: peerPort, host: "127.0.0.1")
        else { return answer("fail the peer did not say its port") }

        answer("ready")
        while let command = readLine() {
            let words = command.split(separator: " ")
            guard words.count == 3, words[0] == "run", let count = Int(words[1]), let size = Int(words[2]), count > 0 else {
                return answer("fail bad command '\(command)'")
            }
            // At least 12 bytes: SocketPort drops smaller messages.
            let payload = Data(repeating: 0x5A, count: max(12, size))
            let outcome: Result<Double, Failure>
            let alive = { peer.isRunning }
            switch mode {
            case .roundtrip: outcome = roundTrips(count, payload, remote, inbox, alive)
            case .oneway: outcome = oneWay(count, payload, remote, inbox, alive)
            }
            switch outcome {
            case .success(let seconds):
                answer("ok \(seconds)")
            case .failure(let failure):
                let why = peer.isRunning ? "\(failure.why) (the peer is alive)" : "\(failure.why); the peer process \(ended(peer))"
                return answer("fail \(why)")
            }
        }
        return 0
    }

    /// Why a driver's run failed.
    struct Failure: Error {
        let why: String
    }

    /// `count` round trips of `payload`, one at a time; the median in seconds.
    private static func roundTrips(
        _ count: Int, _ payload: Data, _ remote: SocketPort, _ inbox: Inbox, _ alive: () -> Bool
    ) -> Result<Double, Failure> {
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for number in 0..<count {
            let before = inbox.received
            let start = DispatchTime.now().uptimeNanoseconds
            guard send(payload, msgid: number, to: remote) else {
                return .failure(Failure(why: "SocketPort.send returned false (round trip \(number), \(payload.count) B)"))
            }
            guard inbox.wait(until: before + 1, while: alive) else {
                return .failure(Failure(why: "no echo of round trip \(number) within \(Int(answerTimeout)) s"))
            }
            samples.append(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
        }
        return .success(samples.sorted()[count / 2])
    }

    /// `count` messages of `payload` back to back, then the peer's acknowledgement; the
    /// whole time in seconds.
    private static func oneWay(
        _ count: Int, _ payload: Data, _ remote: SocketPort, _ inbox: Inbox, _ alive: () -> Bool
    ) -> Result<Double, Failure> {
        let before = inbox.received
        let start = DispatchTime.now().uptimeNanoseconds
        // A send to a dead or stuck peer waits out its own timeout: the batch gets one too.
        let batchDeadline = Date(timeIntervalSinceNow: answerTimeout + Double(count) / 10_000)
        for number in 0..<count {
            guard alive() else { return .failure(Failure(why: "the peer died after \(number) of \(count) back-to-back messages of \(payload.count) B")) }
            guard Date() < batchDeadline else {
                return .failure(Failure(why: "sending \(count) back-to-back messages of \(payload.count) B stalled at message \(number)"))
            }
            // The message id tells the peer how many messages the batch has.
            guard send(payload, msgid: count, to: remote) else {
                return .failure(Failure(why: "SocketPort.send returned false (message \(number) of \(count), \(payload.count) B, back to back)"))
            }
        }
        guard inbox.wait(until: before + 1, while: alive) else {
            return .failure(Failure(why: "no acknowledgement of \(count) back-to-back messages of \(payload.count) B within \(Int(answerTimeout)) s"))
        }
        return .success(Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
    }

    /// `socketport-peer DRIVER-PORT MODE`: echoes every message to the driver's port
    /// (`roundtrip`), or acknowledges each complete batch (`oneway`); ends with its parent.
    static func peer(_ arguments: [String]) -> Int32 {
        guard arguments.count == 2, let driverPort = UInt16(arguments[0]), let mode = Mode(rawValue: arguments[1]),
              let local = SocketPort(tcpPort: 0),
              let remote = SocketPort(remoteWithTCPPort: driverPort, host: "127.0.0.1")
        else { return 2 }
        let inbox = Inbox()
        inbox.onMessage = { message in
            switch mode {
            case .roundtrip:
                _ = send(message.components ?? [], msgid: Int(message.msgid), to: remote)
            case .oneway:
                if inbox.received % Int(message.msgid) == 0 {
                    _ = send(Data(repeating: 1, count: 16), msgid: 0, to: remote)
                }
            }
        }
        local.setDelegate(inbox)
        RunLoop.current.add(local, forMode: .default)
        let parent = getppid()
        RunLoop.current.add(Timer(timeInterval: 0.2, repeats: true) { _ in if getppid() != parent { exit(0) } }, forMode: .default)
        answer("port \(listeningPort(local))")
        while true { _ = RunLoop.current.run(mode: .default, before: .distantFuture) }
    }

    // MARK: Helpers

    /// Receives messages on a SocketPort (on the thread that runs its run loop).
    final class Inbox: NSObject, PortDelegate {
        private(set) var received = 0
        var onMessage: ((PortMessage) -> Void)?

        func handle(_ message: PortMessage) {
            received += 1
            onMessage?(message)
        }

        /// Runs the current run loop until `count` messages have arrived in all, the
        /// answer timeout passes or `alive` turns false; returns whether they arrived.
        func wait(until count: Int, while alive: () -> Bool) -> Bool {
            let deadline = Date(timeIntervalSinceNow: answerTimeout)
            while received < count && Date() < deadline && alive() {
                _ = RunLoop.current.run(mode: .default, before: min(deadline, Date(timeIntervalSinceNow: 0.05)))
            }
            return received >= count
        }
    }

    private static func send(_ payload: Data, msgid: Int, to remote: SocketPort) -> Bool {
        send([payload], msgid: msgid, to: remote)
    }

    private static func send(_ components: [Any], msgid: Int, to remote: SocketPort) -> Bool {
        remote.send(
            before: Date(timeIntervalSinceNow: answerTimeout), msgid: msgid, components: NSMutableArray(array: components),
            from: nil, reserved: 0)
    }

    /// The TCP port a listening SocketPort got.
    private static func listeningPort(_ port: SocketPort) -> UInt16 {
        port.address.withUnsafeBytes { UInt16(bigEndian: $0.loadUnaligned(fromByteOffset: 2, as: UInt16.self)) }
    }

    /// How a process that is no longer running ended.
    private static func ended(_ process: Process) -> String {
        process.waitUntilExit()
        switch process.terminationReason {
        case .uncaughtSignal: return "was killed by signal \(process.terminationStatus) (\(String(cString: strsignal(process.terminationStatus))))"
        case .exit: return "exited with status \(process.terminationStatus)"
        @unknown default: return "ended (\(process.terminationStatus))"
        }
    }

    /// Prints one line for the parent, at once; returns the exit status for a `fail` line.
    @discardableResult
    private static func answer(_ line: String) -> Int32 {
        print(line)
        fflush(nil)
        return line.hasPrefix("fail") ? 1 : 0
    }
}
