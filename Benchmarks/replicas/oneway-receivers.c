// One-way streams of 101-byte frames (PortKit's 64-byte message) from this process to a
// child over a Unix stream socket pair, in C: what the receiver's way of waiting costs the
// sender. A receiver asleep in epoll keeps an entry on the socket's wait queue, so every
// send runs an epoll callback (taking the epoll instance's lock) even while the receiver
// is awake; a receiver blocked in `read` is on the queue only while it sleeps.
//
//   cc -O2 -o /tmp/oneway-receivers Benchmarks/replicas/oneway-receivers.c
//   /tmp/oneway-receivers [messages per block] [blocks]            (default 20000 30)
//
// The receivers take turns block by block; printed: the median rate, and the median
// (quartiles) of each block's ratio to the blocking-read receiver's block.
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum receiver { BLOCKING_READ, EPOLL, EPOLL_AND_HANGUP_WATCHER };
static const char *names[] = {"blocking read", "epoll, one registration", "epoll + hang-up watcher (dup)"};
enum { RECEIVERS = 3, FRAME = 101, READ_CHUNK = 256 * 1024, MAX_BLOCKS = 1000 };

static void wait_readable(int epoll) {
    struct epoll_event ready[64];
    if (epoll >= 0) syscall(SYS_epoll_pwait2, epoll, ready, 64, NULL, NULL, 8);
}

// For each run: an 8-byte byte count, that many bytes (counted), then the count back.
static void receive(int fd, enum receiver style) {
    char *buffer = malloc(READ_CHUNK);
    int epoll = -1;
    if (style != BLOCKING_READ) {
        epoll = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event readable = {.events = EPOLLIN | EPOLLET, .data.u64 = 1};
        epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &readable);
        if (style == EPOLL_AND_HANGUP_WATCHER) {
            struct epoll_event hangup = {.events = EPOLLRDHUP, .data.u64 = 2};
            epoll_ctl(epoll, EPOLL_CTL_ADD, dup(fd), &hangup);
        }
        int on = 1;
        ioctl(fd, FIONBIO, &on);
    }
    for (;;) {
        unsigned long long total = 0, got = 0;
        while (got < sizeof total) {
            ssize_t n = recv(fd, (char *)&total + got, sizeof total - got, 0);
            if (n == 0) _exit(0);
            if (n > 0) got += n; else wait_readable(epoll);
        }
        for (got = 0; got < total;) {
            unsigned long long left = total - got;
            ssize_t n = recv(fd, buffer, left < READ_CHUNK ? left : READ_CHUNK, 0);
            if (n == 0) _exit(0);
            if (n > 0) got += n; else wait_readable(epoll);
        }
        if (write(fd, &total, sizeof total) != sizeof total) _exit(1);
    }
}

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 20000, blocks = argc > 2 ? atoi(argv[2]) : 30;
    if (count < 1 || blocks < 1 || blocks > MAX_BLOCKS) {
        fprintf(stderr, "usage: %s [messages per block] [blocks, at most %d]\n", argv[0], MAX_BLOCKS);
        return 2;
    }
    int sockets[RECEIVERS][2];
    pid_t children[RECEIVERS];
    for (int r = 0; r < RECEIVERS; r++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets[r]) != 0) return 1;
        children[r] = fork();
        if (children[r] == 0) receive(sockets[r][1], (enum receiver)r);
        close(sockets[r][1]);
    }
    static double rates[RECEIVERS][MAX_BLOCKS], sorted[MAX_BLOCKS], ratios[MAX_BLOCKS];
    static char frame[FRAME];
    for (int b = 0; b < blocks; b++) {
        for (int r = 0; r < RECEIVERS; r++) {
            int fd = sockets[r][0];
            unsigned long long total = (unsigned long long)count * FRAME, acknowledged = 0;
            struct timespec start, end;
            clock_gettime(CLOCK_MONOTONIC, &start);
            if (write(fd, &total, sizeof total) != sizeof total) return 1;
            for (int i = 0; i < count; i++) send(fd, frame, FRAME, MSG_NOSIGNAL);
            if (read(fd, &acknowledged, sizeof acknowledged) != sizeof acknowledged || acknowledged != total) return 1;
            clock_gettime(CLOCK_MONOTONIC, &end);
            rates[r][b] = count / ((end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9);
        }
    }
    for (int r = 0; r < RECEIVERS; r++) {
        for (int b = 0; b < blocks; b++) {
            sorted[b] = rates[r][b];
            ratios[b] = rates[r][b] / rates[0][b];
        }
        qsort(sorted, blocks, sizeof(double), ascending);
        qsort(ratios, blocks, sizeof(double), ascending);
        printf("%-32s %9.0f msgs/s   ratio %.3f (quartiles %.3f-%.3f)\n", names[r], sorted[blocks / 2], ratios[blocks / 2],
               ratios[blocks / 4], ratios[3 * blocks / 4]);
    }
    for (int r = 0; r < RECEIVERS; r++) {
        kill(children[r], SIGKILL);
        waitpid(children[r], NULL, 0);
    }
    return 0;
}
