import Testing
@testable import NamedPortServer
@Test func placeholder() { #expect(true) }
