import Glibc

/// Whether this process runs under a sanitizer (ThreadSanitizer or AddressSanitizer): the
/// tests' children are built the same way, with the sanitizer's allocator, which keeps freed
/// memory for its own checks and ignores `malloc_trim`.
package enum Sanitizer {
    /// True when the sanitizer runtime is linked into this process.
    package static let isActive: Bool = {
        let process = dlopen(nil, RTLD_NOW)
        return dlsym(process, "__tsan_init") != nil || dlsym(process, "__asan_init") != nil
    }()
}
