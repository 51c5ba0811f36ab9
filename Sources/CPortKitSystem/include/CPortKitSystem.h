// The few Linux headers and GNU functions the Swift Glibc module does not expose.
// Only the System and Poller layers (and tests) use this module.
#ifndef CPORTKIT_SYSTEM_H
#define CPORTKIT_SYSTEM_H

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/types.h>
#include <stdint.h>

/// The kernel thread id of the calling thread.
int portkit_gettid(void);

/// Sets the calling thread's name as the OS shows it (at most 15 bytes are kept).
int portkit_set_thread_name(const char *name);

/// Reads the calling thread's name into buffer (at least 16 bytes).
int portkit_get_thread_name(char *buffer, size_t size);

/// SO_PEERCRED of a connected Unix-domain socket.
int portkit_peer_credentials(int fd, pid_t *pid, uid_t *uid, gid_t *gid);

/// pipe2(2).
int portkit_pipe2(int fds[2], int flags);

#endif
