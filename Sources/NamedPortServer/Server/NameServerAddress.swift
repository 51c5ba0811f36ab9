import Glibc
import PermanentThread
import PortKitSystem

/// Where a name server listens: the path of a Unix-domain socket.
///
/// The address used when none is given is, in order:
/// 1. the `PORTKIT_NAME_SERVER` environment variable, if set and not empty;
/// 2. `$XDG_RUNTIME_DIR/portkit/names.sock`, if `XDG_RUNTIME_DIR` is set;
/// 3. `/tmp/portkit-<uid>/names.sock`.
///
/// The server makes the `portkit` (or `portkit-<uid>`) directory with mode `0700`, and
/// refuses to use a default directory that another user owns or others can enter.
public enum NameServerAddress {
    /// The environment variable that overrides the default address.
    public static let environmentVariable = "PORTKIT_NAME_SERVER"
    /// The socket's file name in the default directory.
    public static let socketFileName = "names.sock"

    /// The default address, as described on the type.
    public static var `default`: String { defaultAddress(environment: environment, uid: geteuid()) }

    /// `address` if given, else the default.
    public static func resolve(_ address: String?) -> String {
        if let address, !address.isEmpty { return address }
        return `default`
    }

    /// The per-user directory of the default address (ignoring the environment override).
    public static var defaultDirectory: String { defaultDirectory(environment: environment, uid: geteuid()) }

    /// The default address for a given environment and user (the rules on the type).
    static func defaultAddress(environment: (String) -> String?, uid: uid_t) -> String {
        if let override = environment(environmentVariable), !override.isEmpty { return override }
        return defaultDirectory(environment: environment, uid: uid) + "/" + socketFileName
    }

    /// The default directory for a given environment and user.
    static func defaultDirectory(environment: (String) -> String?, uid: uid_t) -> String {
        if let runtime = environment("XDG_RUNTIME_DIR"), runtime.hasPrefix("/") {
            var trimmed = Substring(runtime)
            while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
            return (trimmed == "/" ? "" : String(trimmed)) + "/portkit"
        }
        return "/tmp/portkit-\(uid)"
    }

    /// The lock file beside a socket, held by the server that serves it.
    static func lockPath(for address: String) -> String { address + ".lock" }

    /// The directory part of a path ("." for a bare file name).
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Makes the socket's directory if it is missing (mode 0700), and checks that the
    /// default directory, if that is the one, is private: ours, a real directory, mode 0700.
    static func prepareDirectory(for address: String) throws(NameServerError) {
        let directory = directory(of: address)
        var status: FileSystem.Status
        do {
            status = try FileSystem.status(directory)
        } catch where error == .noSuchFile {
            do {
                try FileSystem.makeDirectory(directory, mode: 0o700)
                // The umask may have taken bits away; it cannot have added any.
                try FileSystem.setPermissions(directory, 0o700)
                status = try FileSystem.status(directory)
            } catch where error == .alreadyExists {
                // Made by another server starting at the same moment.
                do { status = try FileSystem.status(directory) } catch { throw .system(operation: "lstat \(directory)", errno: error.rawValue) }
            } catch {
                throw .system(operation: "mkdir \(directory)", errno: error.rawValue)
            }
        } catch {
            throw .system(operation: "lstat \(directory)", errno: error.rawValue)
        }
        guard status.isDirectory else {
            throw .permissionDenied(reason: "\(directory) is not a directory (a symbolic link is not accepted)")
        }
        guard directory == defaultDirectory else { return }
        guard status.owner == geteuid() else {
            throw .permissionDenied(reason: "\(directory) belongs to uid \(status.owner), not to uid \(geteuid())")
        }
        guard status.permissions & 0o077 == 0 else {
            throw .permissionDenied(
                reason: "\(directory) has mode 0\(String(status.permissions, radix: 8)); it must be 0700 (run `chmod 700 \(directory)`)")
        }
    }

    private static func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(cString: value)
    }
}
