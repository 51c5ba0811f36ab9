import Glibc

/// This process's program: where it was loaded from, and replacing it with another.
package enum ProcessImage {
    /// The path of this process's executable, as the kernel knows it (`/proc/self/exe`);
    /// `nil` when it cannot be read.
    package static var executablePath: String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The path of the program `name` in the directory of this process's executable.
    package static func sibling(_ name: String) -> String? {
        guard let path = executablePath, let slash = path.lastIndex(of: "/") else { return nil }
        return String(path[...slash]) + name
    }

    /// Replaces this process's program with `executable`, run with `arguments` (after its
    /// own path), keeping the process's id, environment, signal mask and the descriptors
    /// not marked close-on-exec. Returns only when that fails, with why.
    ///
    /// The corresponding C function is `execve`, with this process's environment.
    package static func replace(with executable: String, arguments: [String]) -> Errno {
        withSpawnArguments(executable, arguments, SpawnedChild.currentEnvironment) { argv, envp in
            execve(executable, argv, envp)
            return Errno(rawValue: errno)
        }
    }
}
