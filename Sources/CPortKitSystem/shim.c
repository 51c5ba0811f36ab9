#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>
#include <sys/socket.h>
#include <poll.h>
#include "CPortKitSystem.h"

int portkit_gettid(void) { return (int)gettid(); }

int portkit_ppoll(struct pollfd *fds, unsigned long count, const struct timespec *timeout) {
    return ppoll(fds, (nfds_t)count, timeout, NULL);
}

int portkit_set_thread_name(const char *name) {
    char shortened[16];
    size_t i = 0;
    for (; i < 15 && name[i]; i++) shortened[i] = name[i];
    shortened[i] = 0;
    return pthread_setname_np(pthread_self(), shortened);
}

int portkit_get_thread_name(char *buffer, size_t size) {
    return pthread_getname_np(pthread_self(), buffer, size);
}

int portkit_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    *pid = cred.pid; *uid = cred.uid; *gid = cred.gid;
    return 0;
}

#include <fcntl.h>
int portkit_pipe2(int fds[2], int flags) { return pipe2(fds, flags); }

#include <poll.h>
#include <string.h>
#include <errno.h>

ssize_t portkit_send_with_descriptors(int fd, const void *bytes, size_t length,
                                      const int *descriptors, int count, int flags) {
    struct iovec iov = { .iov_base = (void *)bytes, .iov_len = length };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    char control[CMSG_SPACE(sizeof(int) * 253)];
    if (count > 0) {
        if (count > 253) { errno = EINVAL; return -1; }
        memset(control, 0, CMSG_SPACE(sizeof(int) * count));
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * count);
        memcpy(CMSG_DATA(c), descriptors, sizeof(int) * count);
    }
    return sendmsg(fd, &msg, flags);
}

ssize_t portkit_receive_with_descriptors(int fd, void *bytes, size_t capacity,
                                         int *descriptors, int max_descriptors, int *count,
                                         int *truncated, int flags) {
    pid_t pid; uid_t uid; gid_t gid; int has;
    return portkit_receive_with_credentials(fd, bytes, capacity, descriptors, max_descriptors, count,
                                            truncated, flags, &pid, &uid, &gid, &has);
}

int portkit_pass_credentials(int fd) {
    int on = 1;
    return setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
}

ssize_t portkit_receive_with_credentials(int fd, void *bytes, size_t capacity,
                                         int *descriptors, int max_descriptors, int *count,
                                         int *truncated, int flags,
                                         pid_t *pid, uid_t *uid, gid_t *gid, int *has_credentials) {
    struct iovec iov = { .iov_base = bytes, .iov_len = capacity };
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    char control[CMSG_SPACE(sizeof(int) * 253) + CMSG_SPACE(sizeof(struct ucred))];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    *count = 0;
    *truncated = 0;
    *has_credentials = 0;
    ssize_t n = recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS
            && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred cred;
            memcpy(&cred, CMSG_DATA(c), sizeof cred);
            *pid = cred.pid; *uid = cred.uid; *gid = cred.gid;
            *has_credentials = 1;
            continue;
        }
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int received = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *data = (int *)CMSG_DATA(c);
        for (int i = 0; i < received; i++) {
            if (*count < max_descriptors) descriptors[(*count)++] = data[i];
            else { close(data[i]); *truncated = 1; }
        }
    }
    if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) *truncated = 1;
    return n;
}

int portkit_poll_one(int fd, short events, int timeout_ms) {
    struct pollfd p = { .fd = fd, .events = events, .revents = 0 };
    int n = poll(&p, 1, timeout_ms);
    if (n <= 0) return n;
    return p.revents;
}

#include <signal.h>
#include <time.h>

ssize_t portkit_write_nosigpipe(int fd, const void *bytes, size_t length) {
    sigset_t pipe_only, old, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    ssize_t n = write(fd, bytes, length);
    int saved = errno;
    if (n < 0 && saved == EPIPE && !was_pending) {
        struct timespec zero = { 0, 0 };
        while (sigtimedwait(&pipe_only, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = saved;
    return n;
}

#include <sys/prctl.h>

int portkit_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0);
}

// MARK: - NamedPortServer (the name server's listening socket)

int portkit_accept4(int fd, int flags) { return accept4(fd, NULL, NULL, flags); }

// MARK: - PermanentThread (a loop that watches no descriptor sleeps on a futex)

#include <linux/futex.h>
#include <sys/syscall.h>

int portkit_futex_sleep(uint32_t *word, int64_t timeout_ns) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != 0) return 0;
    return portkit_futex_wait_while_for(word, 0, timeout_ns);
}

void portkit_futex_wake(uint32_t *word) {
    __atomic_store_n(word, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void portkit_futex_reset(uint32_t *word) { __atomic_store_n(word, 0, __ATOMIC_RELEASE); }

// MARK: - PermanentThread (a `DoneWord`: its waiter sleeps on it until it is marked done)

uint32_t portkit_word_load(uint32_t *word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

void portkit_word_store(uint32_t *word, uint32_t value) { __atomic_store_n(word, value, __ATOMIC_RELEASE); }

uint32_t portkit_word_exchange(uint32_t *word, uint32_t value) {
    return __atomic_exchange_n(word, value, __ATOMIC_ACQ_REL);
}

bool portkit_word_compare_exchange(uint32_t *word, uint32_t expected, uint32_t desired) {
    return __atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

// `ns` (at least 0) as a timespec in `into`; NULL for a negative `ns` (no limit).
static struct timespec *timespec_of(int64_t ns, struct timespec *into) {
    if (ns < 0) return NULL;
    into->tv_sec = (time_t)(ns / 1000000000);
    into->tv_nsec = (long)(ns % 1000000000);
    return into;
}

int portkit_futex_wait_while_for(uint32_t *word, uint32_t value, int64_t timeout_ns) {
    struct timespec relative;
    return (int)syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, timespec_of(timeout_ns, &relative), NULL, 0);
}

int64_t portkit_futex_deadline(int64_t timeout_ns) {
    if (timeout_ns < 0) return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    // Past about 292 years from boot: no deadline.
    return timeout_ns > INT64_MAX - now_ns ? -1 : now_ns + timeout_ns;
}

int portkit_futex_wait_while_until(uint32_t *word, uint32_t value, int64_t deadline_ns) {
    struct timespec absolute;
    // Without FUTEX_CLOCK_REALTIME, FUTEX_WAIT_BITSET's absolute time is CLOCK_MONOTONIC's.
    long result = syscall(SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, value, timespec_of(deadline_ns, &absolute), NULL,
                          FUTEX_BITSET_MATCH_ANY);
    return result < 0 && errno == ETIMEDOUT ? 1 : 0;
}

void portkit_futex_wake_one(uint32_t *word) { syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }

#include <sched.h>

int portkit_allowed_cpu_count(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    return CPU_COUNT(&set);
}

// MARK: - The System layer's fault seam (tests only)

int portkit_fault_seam_rule_count = 0;

#include <sys/syscall.h>
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int portkit_peer_pidfd(int fd) {
    int pidfd = -1;
    socklen_t len = sizeof(pidfd);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) return -1;
    return pidfd;
}

int portkit_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int portkit_pidfd_alive(int pidfd) {
    struct pollfd p = { .fd = pidfd, .events = POLLIN, .revents = 0 };
    int n = poll(&p, 1, 0);
    if (n < 0) return -1;
    return n == 0 ? 1 : 0;
}
