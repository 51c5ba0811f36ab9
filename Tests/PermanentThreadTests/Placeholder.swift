import Testing
@testable import PermanentThread
@Test func placeholder() { #expect(true) }
