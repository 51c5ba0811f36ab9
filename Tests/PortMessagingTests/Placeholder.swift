import Testing
@testable import PortMessaging
@Test func placeholder() { #expect(true) }
