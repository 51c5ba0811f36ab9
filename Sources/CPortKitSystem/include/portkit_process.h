// Starting a service process: what the name server's activation needs that the Swift
// Glibc module does not expose (posix_spawn's attributes). Its end is followed through a
// pidfd (portkit_pidfd_open).
#ifndef PORTKIT_PROCESS_H
#define PORTKIT_PROCESS_H

#include <sys/types.h>

/// posix_spawn(3) of a service, detached from what the spawner holds: standard input from
/// /dev/null, standard output and error inherited, every descriptor from 3 up closed, the
/// signal mask emptied and every signal's disposition reset to its default (a daemon
/// blocks the signals its signalfd reads, and a child would inherit that). Returns 0 and
/// *pid, or an error number.
int portkit_spawn_service(pid_t *pid, const char *path, char *const argv[], char *const envp[]);

#endif
