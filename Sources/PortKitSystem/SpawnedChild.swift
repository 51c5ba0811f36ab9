import Glibc

/// A child process this process spawned: its id, a signal to it, and the wait for its end.
/// A plain value: waiting for it (reaping it) is its owner's job, once.
package struct SpawnedChild: Sendable, Hashable {
    /// The child's process id.
    package let pid: pid_t

    /// Wraps the id of a child this process spawned.
    package init(pid: pid_t) { self.pid = pid }

    /// Spawns `executable` (a path) with `arguments` and `environment` (`NAME=value`
    /// strings). Each of `descriptors` becomes, in the child, the descriptor number it is
    /// paired with (its close-on-exec cleared there only); every other descriptor of this
    /// process made close-on-exec stays out of the child.
    ///
    /// The corresponding C function is `posix_spawn` (which reports its error itself, never
    /// `EINTR`), with one `dup2` file action per descriptor.
    package static func spawn(
        _ executable: String, arguments: [String] = [], environment: [String] = currentEnvironment,
        descriptors: [(FileDescriptor, CInt)] = []
    ) throws(Errno) -> SpawnedChild {
        // The descriptors move out of the way of the target numbers first (above them all),
        // so that no dup2 overwrites a descriptor still to be moved.
        let floor = (descriptors.map(\.1).max() ?? 2) + 1
        var high: [FileDescriptor] = []
        defer { for fd in high { try? fd.close() } }
        for (fd, _) in descriptors { high.append(try fd.duplicate(atLeast: max(floor, 64))) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (index, (_, target)) in descriptors.enumerated() {
            posix_spawn_file_actions_adddup2(&actions, high[index].rawValue, target)
        }
        var pid: pid_t = 0
        let status = withSpawnArguments(executable, arguments, environment) { argv, envp in
            posix_spawn(&pid, executable, &actions, nil, argv, envp)
        }
        guard status == 0 else { throw Errno(rawValue: status) }
        return SpawnedChild(pid: pid)
    }

    /// Sends `signal` to the child.
    ///
    /// The corresponding C function is `kill`.
    package func signal(_ signal: CInt) throws(Errno) {
        try nothingOrErrno { Glibc.kill(pid, signal) }.get()
    }

    /// Waits for the child to end and reaps it; returns its raw wait status.
    ///
    /// The corresponding C function is `waitpid`.
    package func wait() throws(Errno) -> CInt {
        var status: CInt = 0
        try nothingOrErrno(.waitpid) { waitpid(pid, &status, 0) }.get()
        return status
    }

    /// The calling process's environment as `NAME=value` strings.
    package static var currentEnvironment: [String] {
        var result: [String] = []
        var pointer = environ
        while let entry = pointer.pointee {
            result.append(String(cString: entry))
            pointer += 1
        }
        return result
    }
}
