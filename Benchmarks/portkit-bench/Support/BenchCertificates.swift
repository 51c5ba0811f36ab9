import Foundation
import Glibc

/// A throwaway cluster authority and two node certificates ("server", "client"), made with
/// the `openssl` command in a temporary directory for the TLS cases, removed on `remove`.
struct BenchCertificates {
    let directory: String
    let authority: String

    /// The certificate and key files of node `name`.
    func node(_ name: String) -> (certificate: String, privateKey: String) {
        ("\(directory)/\(name).pem", "\(directory)/\(name).key")
    }

    /// Makes the authority and both nodes; `notMeasurable` when `openssl` is missing or fails.
    static func make() throws -> BenchCertificates {
        var template = Array("/tmp/portkit-bench-tls-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw BenchmarkError.system(operation: "mkdtemp", errno: errno)
        }
        let directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let made = BenchCertificates(directory: directory, authority: directory + "/ca.pem")
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try run(["req", "-x509"] + key + ["-keyout", directory + "/ca.key", "-out", made.authority, "-days", "2", "-subj", "/CN=bench-ca"])
        for name in ["server", "client"] {
            let (certificate, privateKey) = made.node(name)
            try run(["req", "-new"] + key + ["-keyout", privateKey, "-out", "\(directory)/\(name).csr", "-subj", "/CN=\(name)"])
            try run([
                "x509", "-req", "-in", "\(directory)/\(name).csr", "-CA", made.authority, "-CAkey", directory + "/ca.key",
                "-set_serial", "\(UInt32.random(in: 1...UInt32.max))", "-days", "2", "-out", certificate,
            ])
        }
        return made
    }

    /// Removes the directory.
    func remove() { try? FileManager.default.removeItem(atPath: directory) }

    private static func run(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { throw BenchmarkError.notMeasurable("cannot run openssl: \(error)") }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw BenchmarkError.notMeasurable("openssl \(arguments.first ?? "") exited \(process.terminationStatus)")
        }
    }
}
