// The few Linux headers and GNU functions the Swift Glibc module does not expose.
// Only the System and Poller layers (and tests) use this module, and portnamed, which
// takes its signals through a signalfd and trims its heap (malloc_trim); and PortKitLocks'
// Unretained, for the Swift runtime's reference counts (portkit_runtime.h).
#ifndef CPORTKIT_SYSTEM_H
#define CPORTKIT_SYSTEM_H

#include <malloc.h>
#ifdef __linux__
// The Linux pollers' and the daemon's interfaces: another platform's backend brings its own.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#endif
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/types.h>
#include <stdint.h>
#include <stdbool.h>
#include "portkit_process.h"
#include "portkit_runtime.h"

/// The kernel thread id of the calling thread.
int portkit_gettid(void);

struct pollfd;
struct timespec;
/// ppoll(2), which needs _GNU_SOURCE: a poll with a nanosecond timeout (NULL: none).
int portkit_ppoll(struct pollfd *fds, unsigned long count, const struct timespec *timeout);

/// Sets the calling thread's name as the OS shows it (at most 15 bytes are kept).
int portkit_set_thread_name(const char *name);

/// Reads the calling thread's name into buffer (at least 16 bytes).
int portkit_get_thread_name(char *buffer, size_t size);

/// SO_PEERCRED of a connected Unix-domain socket.
int portkit_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// pipe2(2).
int portkit_pipe2(int fds[2], int flags);

/// Sends one datagram (or stream chunk) with optional descriptors as SCM_RIGHTS.
/// Returns bytes sent or -1 with errno. flags are passed to sendmsg (use MSG_NOSIGNAL).
ssize_t portkit_send_with_descriptors(int fd, const void *bytes, size_t length,
                                      const int *descriptors, int count, int flags);

/// Receives one datagram with up to max_descriptors SCM_RIGHTS descriptors (close-on-exec).
/// Returns bytes received (0 at end of stream) or -1 with errno; *count gets the number of
/// descriptors received; *truncated is set when the datagram or the descriptors did not fit.
ssize_t portkit_receive_with_descriptors(int fd, void *bytes, size_t capacity,
                                         int *descriptors, int max_descriptors, int *count,
                                         int *truncated, int flags);

/// As portkit_receive_with_descriptors, and the sender's credentials (SCM_CREDENTIALS, which
/// arrive once SO_PASSCRED is set on the socket) into *pid, *uid, *gid; *has_credentials
/// says whether they came. A stream read never spans two senders' data while SO_PASSCRED is set.
ssize_t portkit_receive_with_credentials(int fd, void *bytes, size_t capacity,
                                         int *descriptors, int max_descriptors, int *count,
                                         int *truncated, int flags,
                                         pid_t *pid, uid_t *uid, gid_t *gid, int *has_credentials);

/// Sets SO_PASSCRED: every read then brings the sender's credentials.
int portkit_pass_credentials(int fd);

/// Waits up to timeout_ms (-1: for ever) for events on one descriptor; returns revents,
/// 0 on time-out, -1 with errno.
int portkit_poll_one(int fd, short events, int timeout_ms);

/// write(2) that never raises SIGPIPE: SIGPIPE is blocked in the calling thread for the
/// call, and one it caused is consumed before the mask is restored. For pipes, where
/// MSG_NOSIGNAL does not exist. Returns bytes written or -1 with errno (EPIPE for a
/// closed reader).
ssize_t portkit_write_nosigpipe(int fd, const void *bytes, size_t length);

/// Sets the calling thread's timer slack (PR_SET_TIMERSLACK), in nanoseconds.
int portkit_set_timer_slack(unsigned long nanoseconds);

// MARK: - NamedPortServer (the name server's listening socket)

/// accept4(2) (a GNU call the Glibc module leaves out): accepts with SOCK_CLOEXEC and
/// SOCK_NONBLOCK set atomically, so no child spawned meanwhile inherits the connection.
int portkit_accept4(int fd, int flags);

// MARK: - PermanentThread (a loop that watches no descriptor sleeps on a futex)

/// Sleeps while *word is 0, for at most timeout_ns nanoseconds (negative: for ever):
/// FUTEX_WAIT_PRIVATE. Returns 0 when woken, or at once when *word is not 0; -1 with
/// errno (ETIMEDOUT, EINTR, EAGAIN) otherwise. Any return may be spurious.
int portkit_futex_sleep(uint32_t *word, int64_t timeout_ns);

/// Sets *word to 1 (release) and wakes the one thread sleeping on it: FUTEX_WAKE_PRIVATE.
void portkit_futex_wake(uint32_t *word);

/// Sets *word to 0 (release), before the thread that owns it next sleeps on it.
void portkit_futex_reset(uint32_t *word);

// MARK: - PermanentThread (a `DoneWord`: its waiter sleeps on it until it is marked done)

/// Loads *word (acquire).
uint32_t portkit_word_load(uint32_t *word);
/// Stores value into *word (release).
void portkit_word_store(uint32_t *word, uint32_t value);
/// Stores value into *word and returns what it held (acquire and release).
uint32_t portkit_word_exchange(uint32_t *word, uint32_t value);
/// Sets *word to desired if it holds expected (acquire and release); says whether it did.
bool portkit_word_compare_exchange(uint32_t *word, uint32_t expected, uint32_t desired);
/// Sleeps while *word is value, for at most timeout_ns nanoseconds (negative: for ever):
/// FUTEX_WAIT_PRIVATE. Returns 0 when woken, -1 with errno (EAGAIN when *word was not value,
/// EINTR, ETIMEDOUT when the time ran out) otherwise. Any return may be spurious.
int portkit_futex_wait_while_for(uint32_t *word, uint32_t value, int64_t timeout_ns);
/// The deadline timeout_ns nanoseconds from now on CLOCK_MONOTONIC, in nanoseconds (negative
/// timeout_ns: -1, no deadline), for `portkit_futex_wait_while_until`.
int64_t portkit_futex_deadline(int64_t timeout_ns);
/// Sleeps while *word is value, until the CLOCK_MONOTONIC time deadline_ns (negative: for
/// ever): FUTEX_WAIT_BITSET_PRIVATE with an absolute time, so a wait woken early and
/// repeated keeps its deadline with no clock reading. Returns 1 once the deadline has
/// passed, 0 otherwise (woken, *word not value, a signal: any of them may be spurious).
int portkit_futex_wait_while_until(uint32_t *word, uint32_t value, int64_t deadline_ns);
/// Wakes one thread sleeping on *word: FUTEX_WAKE_PRIVATE.
void portkit_futex_wake_one(uint32_t *word);
/// How many CPUs the calling thread may run on (sched_getaffinity); 1 if it cannot tell.
int portkit_allowed_cpu_count(void);

/// Tells the CPU the caller spins on a value another thread will change (PAUSE on x86,
/// YIELD on ARM): the spin costs less power and leaves a sibling hyper-thread the core.
static inline void portkit_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/// How many fault rules the System layer's test-only fault seam has armed (0: none, the
/// usual case). Reached only through the two functions below.
extern int portkit_fault_seam_rule_count;

/// Whether a fault rule is armed: one relaxed load, all a wrapped system call pays when
/// no test injects faults.
static inline int portkit_fault_seam_armed(void) {
    return __atomic_load_n(&portkit_fault_seam_rule_count, __ATOMIC_RELAXED);
}

/// Records how many fault rules are armed (called under the seam's lock).
static inline void portkit_fault_seam_set_armed(int count) {
    __atomic_store_n(&portkit_fault_seam_rule_count, count, __ATOMIC_RELAXED);
}

// MARK: - Peer processes (pidfds, for peer requirements)

/// SO_PEERPIDFD of a connected Unix-domain socket (Linux 6.5 and later): a pidfd of the
/// process that connected, close-on-exec. -1 with errno (ENOPROTOOPT on older kernels).
int portkit_peer_pidfd(int fd);

/// pidfd_open(2) (Linux 5.3 and later): a pidfd of process pid, close-on-exec; -1 with errno.
int portkit_pidfd_open(pid_t pid);

/// Whether the process a pidfd refers to is still alive (not exited): 1 alive, 0 exited,
/// -1 with errno. Polls the pidfd without waiting (it is readable once the process exited).
int portkit_pidfd_alive(int pidfd);

#endif
