import Glibc
import CPortKitSystem
import Synchronization
import PortKitLocks

/// Captures another thread's stack: sends it `SIGURG` with `tgkill`; its handler calls
/// `backtrace()` into a buffer allocated beforehand and posts a semaphore; the sampling
/// thread then symbolizes the addresses.
///
/// The handler does only async-signal-safe work: atomics, `backtrace` (warmed up once at
/// installation, so that loading the unwinder, which allocates, does not happen inside
/// the handler), `sem_post`, and it restores `errno`. `SIGURG` is ignored by default, so a
/// stray one harms nothing; a handler installed before ours is still called for the
/// signals that are not ours. One sample at a time, process-wide.
///
/// Side effect on the sampled thread, as with any signal: a blocking call the kernel does
/// not restart (`nanosleep`, `epoll_wait`, `sem_wait`, …) returns early with `EINTR`.
package enum StackSampler {
    /// The signal used to interrupt the sampled thread. Permanent threads unblock it; a
    /// thread that blocks it cannot be sampled.
    package static let signal = SIGURG

    /// Returns the symbolized frames of thread `threadID` (kernel id) from the interrupted
    /// function outwards, or `[]` when it did not answer within `timeout` (it blocks
    /// `SIGURG`, it is gone, or the machinery is unavailable).
    package static func sample(threadID: Int32, timeout: Duration = .milliseconds(250)) -> [String] {
        guard threadID > 0, let functions = samplerFunctions, samplerInstalled else { return [] }
        let addresses: [UnsafeMutableRawPointer?] = samplerLock.withLock { _ in
            samplerTarget.store(threadID, ordering: .releasing)
            guard functions.tgkill(getpid(), threadID, signal) == 0 else {
                samplerTarget.store(0, ordering: .releasing)
                return []
            }
            var answered = waitForHandler(timeout: timeout)
            if !answered {
                // Withdraw the request, unless the handler claimed it already: then it is
                // about to post, and the buffer is not ours until it has.
                let old = samplerTarget.exchange(0, ordering: .acquiringAndReleasing)
                if old == -threadID {
                    _ = nothingOrErrno { sem_wait(samplerSemaphore) }
                    answered = true
                }
            }
            samplerTarget.store(0, ordering: .releasing)
            guard answered else { return [] }
            let depth = Int(samplerDepth.load(ordering: .acquiring))
            let frames = Array(UnsafeBufferPointer(start: samplerFrames, count: max(0, min(depth, samplerCapacity))))
            // The first frames are the handler's and the signal trampoline's; the stalled
            // code starts at the interrupted instruction.
            let interrupted = UnsafeMutableRawPointer(bitPattern: samplerInterruptedPC.load(ordering: .acquiring))
            if let interrupted, let start = frames.firstIndex(of: interrupted) { return Array(frames[start...]) }
            return Array(frames.dropFirst(2))
        }
        return symbolize(addresses, functions)
    }

    private static func waitForHandler(timeout: Duration) -> Bool {
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let (seconds, attoseconds) = timeout.components
        deadline.tv_sec += Int(seconds)
        deadline.tv_nsec += Int(attoseconds / 1_000_000_000)
        if deadline.tv_nsec >= 1_000_000_000 {
            deadline.tv_nsec -= 1_000_000_000
            deadline.tv_sec += 1
        }
        // The deadline is absolute: a wait interrupted by a signal is made again for the time left.
        let waited = nothingOrErrno { sem_timedwait(samplerSemaphore, &deadline) }
        if case .success = waited { return true }
        return false
    }

    /// "symbol + 0x1f in binary" (Swift symbols demangled), or "0x5555… in binary + 0x1f"
    /// for a function the binary does not export (`addr2line` maps that offset); raw text
    /// when unparsable.
    private static func symbolize(_ addresses: [UnsafeMutableRawPointer?], _ functions: SamplerFunctions) -> [String] {
        guard !addresses.isEmpty else { return [] }
        let symbols = addresses.withUnsafeBufferPointer {
            functions.backtraceSymbols($0.baseAddress, CInt($0.count))
        }
        guard let symbols else { return addresses.map { String(describing: $0) } }
        defer { free(symbols) }
        return (0..<addresses.count).map { index in
            guard let raw = symbols[index] else { return "?" }
            return readable(String(cString: raw), functions)
        }
    }

    /// Turns glibc's "path/binary(symbol+0x1f) [0x5555…]" into the forms above.
    private static func readable(_ line: String, _ functions: SamplerFunctions) -> String {
        guard let open = line.firstIndex(of: "("), let close = line[open...].firstIndex(of: ")") else { return line }
        let binary = line[..<open].split(separator: "/").last.map(String.init) ?? ""
        let inside = line[line.index(after: open)..<close]
        let address = line[line.index(after: close)...].filter { $0 != " " && $0 != "[" && $0 != "]" }
        guard let plus = inside.lastIndex(of: "+") else { return line }
        let symbol = String(inside[..<plus])
        let offset = inside[inside.index(after: plus)...]
        if symbol.isEmpty { return "\(address) in \(binary) + \(offset)" }
        return "\(demangle(symbol, functions)) + \(offset) in \(binary)"
    }

    private static func demangle(_ symbol: String, _ functions: SamplerFunctions) -> String {
        guard let demangler = functions.demangle, symbol.hasPrefix("$s") || symbol.hasPrefix("_$s") else { return symbol }
        return symbol.withCString { mangled in
            guard let result = demangler(mangled, strlen(mangled), nil, nil, 0) else { return symbol }
            defer { free(result) }
            return String(cString: result)
        }
    }
}

// MARK: Process-wide state shared with the signal handler

/// The C functions the Glibc module does not import, found once with `dlsym`.
private struct SamplerFunctions {
    typealias Backtrace = @convention(c) (UnsafeMutablePointer<UnsafeMutableRawPointer?>?, CInt) -> CInt
    typealias BacktraceSymbols = @convention(c) (UnsafePointer<UnsafeMutableRawPointer?>?, CInt)
        -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
    typealias Tgkill = @convention(c) (pid_t, pid_t, CInt) -> CInt
    typealias Demangle = @convention(c) (UnsafePointer<CChar>?, Int, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<Int>?, UInt32)
        -> UnsafeMutablePointer<CChar>?

    var backtrace: Backtrace
    var backtraceSymbols: BacktraceSymbols
    var tgkill: Tgkill
    var demangle: Demangle?

    static func load() -> SamplerFunctions? {
        guard let process = dlopen(nil, RTLD_NOW) else { return nil }
        guard let backtrace = dlsym(process, "backtrace"),
              let symbols = dlsym(process, "backtrace_symbols"),
              let tgkill = dlsym(process, "tgkill") else { return nil }
        return SamplerFunctions(
            backtrace: unsafeBitCast(backtrace, to: Backtrace.self),
            backtraceSymbols: unsafeBitCast(symbols, to: BacktraceSymbols.self),
            tgkill: unsafeBitCast(tgkill, to: Tgkill.self),
            demangle: dlsym(process, "swift_demangle").map { unsafeBitCast($0, to: Demangle.self) })
    }
}

// Safety of the nonisolated(unsafe) globals below: each is written once, by its
// initializer, before `samplerInstalled` installs the handler; afterwards the buffer is
// written only by the handler on the thread named in `samplerTarget` (claimed atomically)
// and read by the sampling thread, which holds `samplerLock` and waits on the semaphore
// the handler posts after writing: the semaphore orders the two.

private let samplerFunctions = SamplerFunctions.load()
private let samplerCapacity = 64
nonisolated(unsafe) private let samplerFrames: UnsafeMutablePointer<UnsafeMutableRawPointer?> = {
    let frames = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: samplerCapacity)
    frames.initialize(repeating: nil, count: samplerCapacity)
    return frames
}()
nonisolated(unsafe) private let samplerSemaphore: UnsafeMutablePointer<sem_t> = {
    let semaphore = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
    sem_init(semaphore, 0, 0)
    return semaphore
}()
/// The kernel id of the thread asked for its stack; its handler swaps in the negated id
/// to claim the buffer. 0 when no sample is in progress.
private let samplerTarget = Atomic<Int32>(0)
private let samplerDepth = Atomic<Int32>(0)
/// Where the sampled thread was interrupted, read from the signal's context.
private let samplerInterruptedPC = Atomic<UInt>(0)
/// The offset of the program counter in a `ucontext_t`, worked out before any signal.
private let samplerPCOffset: Int? = {
    #if arch(x86_64)
    // REG_RIP is register 16 of the general registers.
    return MemoryLayout<ucontext_t>.offset(of: \ucontext_t.uc_mcontext.gregs).map { $0 + 16 * MemoryLayout<Int>.size }
    #elseif arch(arm64)
    return MemoryLayout<ucontext_t>.offset(of: \ucontext_t.uc_mcontext.pc)
    #else
    return nil
    #endif
}()
/// One sample at a time (a pthread mutex, so that ThreadSanitizer sees the ordering).
private let samplerLock = Locked<Void>(())
nonisolated(unsafe) private var previousAction = sigaction()

/// Installs the handler once; false if the machinery is unavailable.
private let samplerInstalled: Bool = {
    guard let functions = samplerFunctions else { return false }
    // Touch every global the handler uses, so none is first initialized inside it, and
    // warm up backtrace: its first call loads the unwinder (libgcc_s), which allocates.
    _ = samplerFrames
    _ = samplerSemaphore
    samplerTarget.store(0, ordering: .releasing)
    samplerDepth.store(0, ordering: .releasing)
    samplerInterruptedPC.store(0, ordering: .releasing)
    _ = samplerPCOffset
    _ = functions.backtrace(samplerFrames, CInt(samplerCapacity))
    var action = sigaction()
    action.__sigaction_handler.sa_sigaction = stackSamplerHandler
    action.sa_flags = SA_SIGINFO | SA_RESTART
    sigemptyset(&action.sa_mask)
    // Read the previous action first, so the handler never sees it half-written.
    guard sigaction(StackSampler.signal, nil, &previousAction) == 0 else { return false }
    return sigaction(StackSampler.signal, &action, nil) == 0
}()

/// The `SIGURG` handler. Async-signal-safe: atomics, a load from the signal context,
/// `backtrace`, `sem_post`.
private func stackSamplerHandler(
    _ signal: CInt, _ info: UnsafeMutablePointer<siginfo_t>?, _ context: UnsafeMutableRawPointer?
) {
    let savedErrno = errno
    defer { errno = savedErrno }
    let me = ThreadIdentity.kernelID
    if samplerTarget.compareExchange(expected: me, desired: -me, ordering: .acquiringAndReleasing).exchanged,
       let functions = samplerFunctions {
        let depth = functions.backtrace(samplerFrames, CInt(samplerCapacity))
        var pc: UInt = 0
        if let context, let offset = samplerPCOffset { pc = context.load(fromByteOffset: offset, as: UInt.self) }
        samplerInterruptedPC.store(pc, ordering: .releasing)
        samplerDepth.store(depth, ordering: .releasing)
        sem_post(samplerSemaphore)
        return
    }
    // Not ours: pass it to whoever had the signal before us.
    let previous = previousAction
    if previous.sa_flags & SA_SIGINFO != 0 {
        previous.__sigaction_handler.sa_sigaction?(signal, info, context)
    } else if let handler = previous.__sigaction_handler.sa_handler,
              unsafeBitCast(handler, to: Int.self) != 1 /* SIG_IGN */ {
        handler(signal)
    }
}
