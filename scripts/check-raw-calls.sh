#!/usr/bin/env bash
# Fails when code outside the System layer calls the kernel itself. Every system call goes
# through the PortKitSystem module (its EINTR rule and fault seam), and the futex calls of
# locks and sleeping words through PortKitLocks; this reads the undefined symbols of every
# Swift object file of the package's other modules and programs (the poller backends
# included), after a debug build, and lists the system calls among them: the C library's,
# and those of CPortKitSystem's shim.
#
#   scripts/check-raw-calls.sh [BUILD_DIR]     (default .build/debug)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-.build/debug}
calls='accept|accept4|bind|close|connect|dup|dup2|dup3|epoll_create1|epoll_ctl|epoll_pwait2|epoll_wait|eventfd|execv|execve|fcntl|fstat|getsockopt|inotify_add_watch|inotify_init1|ioctl|kill|listen|lstat|mkdir|open|opendir|pidfd_open|pipe|pipe2|poll|posix_spawn|ppoll|pthread_sigmask|read|readlink|recv|recvmsg|rmdir|send|sendmsg|sendto|setsockopt|shutdown|signalfd|socket|socketpair|stat|unlink|waitid|waitpid|write'
shim='portkit_(accept4|futex_[a-z_]+|get_thread_name|gettid|pass_credentials|peer_credentials|peer_pidfd|pidfd_alive|pidfd_open|pipe2|poll_one|ppoll|receive_with_credentials|receive_with_descriptors|send_with_descriptors|set_thread_name|set_timer_slack|spawn_service|write_nosigpipe)'
# PortKitSystem and PortKitLocks are not read: their objects are where the calls are (the
# TLS BIO's reads and writes included, which PortCluster makes through them).
modules="PermanentThread PortMessaging NamedPortServer PortCluster PortActors NameDaemon portnamed portnamed_cluster portname"
found=0
for module in $modules; do
    dir="$build/$module.build"
    [ -d "$dir" ] || { echo "check-raw-calls: no $dir (build first)" >&2; exit 2; }
    # The module's sources now (an object of a file since moved away may linger).
    sources=$(find "Sources/${module//_/-}" -name '*.swift' -exec basename {} \;)
    for object in "$dir"/*.swift.o; do
        name=$(basename "$object")
        grep -qx "${name%.o}" <<<"$sources" || continue
        hits=$(nm -u "$object" | awk '{print $NF}' | grep -Ex "($calls|$shim)(@.*)?" || true)
        if [ -n "$hits" ]; then
            echo "$module/${name%.o}: $(echo $hits | tr '\n' ' ')"
            found=1
        fi
    done
done
if [ $found = 1 ]; then
    echo "check-raw-calls: system calls outside the System layer (above); add a call there and use it" >&2
    exit 1
fi
echo "check-raw-calls: every system call is in the System layer"
