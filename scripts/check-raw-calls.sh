#!/usr/bin/env bash
# Fails when code outside the System layer calls the kernel itself. Every system call goes
# through PermanentThread's System folder (its EINTR rule and fault seam) and the poller
# backends (Poller/); this reads the undefined symbols of every other Swift object file of
# the package's modules and programs, after a debug build, and lists the system calls
# among them.
#
#   scripts/check-raw-calls.sh [BUILD_DIR]     (default .build/debug)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-.build/debug}
calls='accept|accept4|bind|close|connect|dup|dup2|dup3|epoll_create1|epoll_ctl|epoll_pwait2|epoll_wait|eventfd|execv|execve|fcntl|fstat|getsockopt|inotify_add_watch|inotify_init1|ioctl|kill|listen|lstat|mkdir|open|opendir|pidfd_open|pipe|pipe2|poll|posix_spawn|ppoll|pthread_sigmask|read|readlink|recv|recvmsg|rmdir|send|sendmsg|sendto|setsockopt|shutdown|signalfd|socket|socketpair|stat|unlink|waitid|waitpid|write'
# The layer's own files, whose objects may call the kernel, and one known exception:
# OpenSSLSupport.swift, where the TLS BIO (COpenSSL's shim.h, inlined) sends and receives
# on the socket itself, outside the EINTR rule and the fault seam.
allowed=$( (ls Sources/PermanentThread/System/*.swift Sources/PermanentThread/Poller/*.swift; echo OpenSSLSupport.swift) | xargs -n1 basename | sed 's/$/.o/')
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
        if grep -qx "$name" <<<"$allowed"; then continue; fi
        hits=$(nm -u "$object" | awk '{print $NF}' | grep -Ex "($calls)(@.*)?" || true)
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
