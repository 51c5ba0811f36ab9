/// Message ids the test helper's port worker (Tests/TestHelper/PortScenarios.swift)
/// understands; the port tests send them.
package enum WorkerOp {
    package static let echo: UInt32 = 1
    package static let stream: UInt32 = 2
    package static let streamReport: UInt32 = 3
    package static let sleepThenReply: UInt32 = 4
    package static let writeToDescriptor: UInt32 = 5
    package static let talkToPassedPort: UInt32 = 6
    package static let fromPassedPort: UInt32 = 7
    package static let sendBack: UInt32 = 8
    package static let exit: UInt32 = 9
    /// Starts a thread that sends `streamed` messages to the boss until sending fails.
    package static let streamToBoss: UInt32 = 10
    package static let streamed: UInt32 = 11
}

