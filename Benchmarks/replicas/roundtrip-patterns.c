// Round trips between two processes over a Unix stream socket pair, in C, with the system
// calls of `port.process.roundtrip`'s raw baseline and of PortKit's requester and child,
// so the cost of the call pattern alone can be told from the cost of PortKit's own code.
//
//   cc -O2 -o /tmp/roundtrip-patterns Benchmarks/replicas/roundtrip-patterns.c
//   /tmp/roundtrip-patterns [blocks] [round trips per block]       (default 40 1000)
//   taskset -c 0 /tmp/roundtrip-patterns                           (both sides on one CPU)
//
// Each pattern has a child of its own; the patterns take turns block by block. Printed:
// the median of the blocks' median round trips, and the median (quartiles) of each block's
// ratio to the `raw` block just before it. Frames are 101 bytes (PortKit's 64-byte
// request: a 32-byte header, a 5-byte component header, the payload).
#define _GNU_SOURCE
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum requester { BLOCKING_READ, POLL_THEN_RECVMSG, RECVMSG_WITH_TIMEOUT };
enum child { READ_WRITE, EPOLL_RECVMSG_SEND };

struct pattern {
    const char *name;
    enum requester requester;
    enum child child;
};

static const struct pattern patterns[] = {
    {"raw: read / read", BLOCKING_READ, READ_WRITE},
    {"raw requester / PortKit child", BLOCKING_READ, EPOLL_RECVMSG_SEND},
    {"poll 1ms+recvmsg / PortKit child", POLL_THEN_RECVMSG, EPOLL_RECVMSG_SEND},
    {"recvmsg SO_RCVTIMEO / PortKit child", RECVMSG_WITH_TIMEOUT, EPOLL_RECVMSG_SEND},
};
enum { PATTERNS = sizeof patterns / sizeof patterns[0], FRAME = 101, READ_CHUNK = 256 * 1024 };

static char *buffer;

// PortKit's receive: one recvmsg into a 256 KiB buffer with room for 253 descriptors.
static ssize_t receive(int fd, int flags) {
    static char control[CMSG_SPACE(sizeof(int) * 253)];
    struct iovec iov = {buffer, READ_CHUNK};
    struct msghdr message = {0};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    return recvmsg(fd, &message, flags | MSG_CMSG_CLOEXEC);
}

static void serve(int fd, enum child style) {
    if (style == READ_WRITE) {
        for (;;) {
            ssize_t got = read(fd, buffer, READ_CHUNK);
            if (got <= 0) _exit(0);
            if (write(fd, buffer, got) != got) _exit(1);
        }
    }
    // A run loop's pass: sleep in epoll_pwait2, read, reply.
    int epoll = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event watch = {.events = EPOLLIN | EPOLLET, .data.u64 = 2}, ready[64];
    epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &watch);
    for (;;) {
        syscall(SYS_epoll_pwait2, epoll, ready, 64, NULL, NULL, 8);
        ssize_t got = receive(fd, MSG_DONTWAIT);
        if (got == 0) _exit(0);
        if (got > 0) send(fd, buffer, got, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
}

static double microseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1e6 + now.tv_nsec / 1e3;
}

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double round_trip(int fd, enum requester style) {
    static char frame[FRAME];
    double start = microseconds();
    if (style == BLOCKING_READ) {
        if (write(fd, frame, FRAME) != FRAME) exit(1);
        for (int got = 0; got < FRAME;) {
            ssize_t n = read(fd, frame + got, FRAME - got);
            if (n <= 0) exit(1);
            got += n;
        }
    } else {
        send(fd, frame, FRAME, MSG_DONTWAIT | MSG_NOSIGNAL);
        for (int got = 0; got < FRAME;) {
            if (style == POLL_THEN_RECVMSG) {
                struct pollfd wait = {fd, POLLIN, 0};
                poll(&wait, 1, 1);
            }
            ssize_t n = receive(fd, style == POLL_THEN_RECVMSG ? MSG_DONTWAIT : 0);
            if (n == 0) exit(1);
            if (n > 0) got += n;
        }
    }
    return microseconds() - start;
}

int main(int argc, char **argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 40, count = argc > 2 ? atoi(argv[2]) : 1000;
    if (blocks < 1 || count < 1) {
        fprintf(stderr, "usage: %s [blocks] [round trips per block]\n", argv[0]);
        return 2;
    }
    buffer = malloc(READ_CHUNK);
    memset(buffer, 0, READ_CHUNK);
    int sockets[PATTERNS][2];
    pid_t children[PATTERNS];
    for (int p = 0; p < PATTERNS; p++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets[p]) != 0) return 1;
        children[p] = fork();
        if (children[p] == 0) serve(sockets[p][1], patterns[p].child);
        close(sockets[p][1]);
        if (patterns[p].requester == RECVMSG_WITH_TIMEOUT) {
            struct timeval slice = {0, 1000};
            setsockopt(sockets[p][0], SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof slice);
        }
    }
    double *samples = malloc(sizeof(double) * count);
    double *medians = malloc(sizeof(double) * PATTERNS * blocks);
    for (int b = 0; b < blocks; b++) {
        for (int p = 0; p < PATTERNS; p++) {
            for (int i = 0; i < count; i++) samples[i] = round_trip(sockets[p][0], patterns[p].requester);
            qsort(samples, count, sizeof(double), ascending);
            medians[p * blocks + b] = samples[count / 2];
        }
    }
    double *sorted = malloc(sizeof(double) * blocks), *ratios = malloc(sizeof(double) * blocks);
    for (int p = 0; p < PATTERNS; p++) {
        for (int b = 0; b < blocks; b++) {
            sorted[b] = medians[p * blocks + b];
            ratios[b] = medians[p * blocks + b] / medians[b];
        }
        qsort(sorted, blocks, sizeof(double), ascending);
        qsort(ratios, blocks, sizeof(double), ascending);
        printf("%-38s %7.2f us   ratio to raw %.3f (quartiles %.3f-%.3f)\n", patterns[p].name, sorted[blocks / 2],
               ratios[blocks / 2], ratios[blocks / 4], ratios[3 * blocks / 4]);
    }
    for (int p = 0; p < PATTERNS; p++) {
        kill(children[p], SIGKILL);
        waitpid(children[p], NULL, 0);
    }
    return 0;
}
