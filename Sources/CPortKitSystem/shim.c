#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>
#include <sys/socket.h>
#include "CPortKitSystem.h"

int portkit_gettid(void) { return (int)gettid(); }

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
