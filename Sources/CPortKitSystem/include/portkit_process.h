// Starting a service process and following its end: what the name server's activation
// needs that the Swift Glibc module does not expose (pidfd_open, posix_spawn's attributes).
#ifndef PORTKIT_PROCESS_H
#define PORTKIT_PROCESS_H

#include <sys/types.h>

/// pidfd_open(2): a descriptor (close-on-exec) that polls readable once process pid has
/// ended. -1 with errno (ENOSYS before Linux 5.3).
int portkit_pidfd_open(pid_t pid);

/// posix_spawn(3) of a service, detached from what the spawner holds: standard input from
/// /dev/null, standard output and error inherited, every descriptor from 3 up closed, the
/// signal mask emptied and every signal's disposition reset to its default (a daemon
/// blocks the signals its signalfd reads, and a child would inherit that). Returns 0 and
/// *pid, or an error number.
int portkit_spawn_service(pid_t *pid, const char *path, char *const argv[], char *const envp[]);

#endif
