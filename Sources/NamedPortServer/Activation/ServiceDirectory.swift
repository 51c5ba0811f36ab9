import Glibc
import PermanentThread
import PortKitSystem

/// Where a name server finds its service files: the directories searched, in order, for
/// `NAME.service` when a lookup finds `NAME` absent (docs/NAMES.md, "Services started on
/// demand").
public enum ServiceDirectory {
    /// The system scope, searched by every server: `/etc/portkit/services` (the
    /// administrator's), then `/usr/share/portkit/services` (packages').
    public static let systemDirectories = ["/etc/portkit/services", "/usr/share/portkit/services"]

    /// The user scope: `$XDG_DATA_HOME/portkit/services` when `XDG_DATA_HOME` is an
    /// absolute path, else `$HOME/.local/share/portkit/services`; `nil` with neither.
    public static var userDirectory: String? {
        if let data = getenv("XDG_DATA_HOME").map({ String(cString: $0) }), data.hasPrefix("/") {
            return data + "/portkit/services"
        }
        if let home = getenv("HOME").map({ String(cString: $0) }), home.hasPrefix("/") {
            return home + "/.local/share/portkit/services"
        }
        return nil
    }

    /// The directories `portnamed` searches when given no `--service-dir`: for root, the
    /// system scope; for any other user, the user scope first (its files take precedence),
    /// then the system scope.
    public static var defaultDirectories: [String] {
        getuid() == 0 ? systemDirectories : (userDirectory.map { [$0] } ?? []) + systemDirectories
    }

    /// The suffix of a service file's name: the file for the name `NAME` is `NAME.service`.
    public static let fileSuffix = ".service"

    /// The largest service file read.
    static let maxFileBytes = 16 * 1024
}

/// The service files of a server's directories, read when asked: a file added, changed
/// or removed counts from the next lookup on, with no reload.
struct ServiceCatalog {
    let directories: [String]

    /// The service file for `name`, from the first directory that has `NAME.service`;
    /// `nil` when none has. A file that cannot be read or used is an error.
    func file(for name: String) -> Result<ActivationFile, ActivationFileError>? {
        for directory in directories {
            let path = directory + "/" + name + ServiceDirectory.fileSuffix
            let bytes: [UInt8]
            do {
                bytes = try FileContents.read(atPath: path, limit: ServiceDirectory.maxFileBytes)
            } catch where error == .noSuchFile || error.rawValue == ENOTDIR {
                continue
            } catch {
                return .failure(ActivationFileError(path: path, line: 0, reason: "\(error)"))
            }
            guard let text = String(validating: bytes, as: UTF8.self) else {
                return .failure(ActivationFileError(path: path, line: 0, reason: "not UTF-8"))
            }
            return ActivationFile.parse(text, path: path).flatMap { file in
                file.name == name
                    ? .success(file)
                    : .failure(ActivationFileError(path: path, line: 0, reason: "Name=\(file.name) does not match the file's name"))
            }
        }
        return nil
    }

    /// Every name some directory has a service file for, sorted.
    var names: [String] {
        var names = Set<String>()
        for directory in directories {
            for entry in (try? FileContents.entries(ofDirectory: directory)) ?? [] where entry.hasSuffix(ServiceDirectory.fileSuffix) {
                let name = String(entry.dropLast(ServiceDirectory.fileSuffix.count))
                if NameRules.problem(with: name, allowEmpty: false) == nil { names.insert(name) }
            }
        }
        return names.sorted()
    }
}
