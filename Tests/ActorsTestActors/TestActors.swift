import Distributed
import Glibc
import PermanentThread
import PortActors
import PortMessaging

/// A small struct argument and result.
public struct Point: Codable, Sendable, Equatable {
    /// Coordinates.
    public var x: Int, y: Int
    /// A label.
    public var label: String

    /// Makes a point.
    public init(x: Int, y: Int, label: String) {
        self.x = x
        self.y = y
        self.label = label
    }
}

/// An error that travels back as itself.
public struct Refusal: Error, Codable, Equatable {
    /// Why.
    public var reason: String

    /// Makes a refusal.
    public init(reason: String) { self.reason = reason }
}

/// An error that does not travel (not `Codable`).
public struct OpaqueFailure: Error, CustomStringConvertible {
    /// What it says.
    public var description: String { "opaque failure" }
}

/// An actor on the default executor: records values in the order calls run.
public distributed actor Recorder {
    /// The actor system.
    public typealias ActorSystem = PortActorSystem

    private var recorded: [Int] = []

    /// Makes a recorder.
    public init(actorSystem: PortActorSystem) {
        self.actorSystem = actorSystem
    }

    /// Records `value` (a one-way call: `Void`, non-throwing).
    public distributed func record(_ value: Int) { recorded.append(value) }

    /// Records `value`, waiting for it.
    public distributed func recordWaiting(_ value: Int) throws { recorded.append(value) }

    /// What was recorded, in order.
    public distributed func values() -> [Int] { recorded }
}

/// The actor the tests call, on a permanent thread: the thread is its serial executor.
/// `report` is told what the tests observe from outside (a call waiting, a cancellation).
public distributed actor Worker {
    /// The actor system.
    public typealias ActorSystem = PortActorSystem

    private let thread: PermanentThread
    private let report: @Sendable (String) -> Void
    private var recorded: [Int] = []

    /// Makes a worker on `thread`.
    public init(actorSystem: PortActorSystem, thread: PermanentThread, report: @escaping @Sendable (String) -> Void = { _ in }) {
        self.actorSystem = actorSystem
        self.thread = thread
        self.report = report
        actorSystem.run(id, on: thread)
    }

    /// The permanent thread's executor.
    public nonisolated var unownedExecutor: UnownedSerialExecutor { actorSystem.executor(for: id) }

    /// Returns the point moved by (1, 2), relabelled.
    public distributed func move(_ point: Point) -> Point {
        Point(x: point.x + 1, y: point.y + 2, label: point.label + "!")
    }

    /// The worker's process id.
    public distributed func pid() -> Int32 { getpid() }

    /// Whether the call runs on the worker's permanent thread.
    public distributed func runsOnItsThread() -> Bool { thread.isCurrent }

    /// Records `value` (a one-way call: `Void`, non-throwing).
    public distributed func record(_ value: Int) { recorded.append(value) }

    /// Records `value`, waiting for it.
    public distributed func recordWaiting(_ value: Int) throws { recorded.append(value) }

    /// What was recorded, in order.
    public distributed func values() -> [Int] { recorded }

    /// Throws `Refusal(reason:)`.
    public distributed func refuse(_ reason: String) throws -> Int { throw Refusal(reason: reason) }

    /// Throws an error that is not `Codable`.
    public distributed func failOpaquely() throws { throw OpaqueFailure() }

    /// Waits up to `seconds`; reports "cancelled" when its task is cancelled first, and
    /// "waiting" when it starts.
    public distributed func wait(seconds: Int) async throws -> String {
        report("waiting")
        do {
            try await Task.sleep(for: .seconds(seconds))
        } catch {
            report("cancelled")
            throw error
        }
        return "waited"
    }

    /// Reads what the descriptor's file holds from its start, then closes the descriptor.
    public distributed func read(_ descriptor: TransferableDescriptor) -> String {
        defer { close(descriptor.rawValue) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let count = pread(descriptor.rawValue, &bytes, bytes.count, 0)
        return count < 0 ? "error \(errno)" : String(decoding: bytes[..<count], as: UTF8.self)
    }

    /// Sends `text` to `port` as a one-way message, and says it did.
    public distributed func tell(_ port: TransferablePort, _ text: String) throws -> Bool {
        try port.port.send(Message(id: 9, text: text), timeout: .seconds(10))
        return true
    }
}
