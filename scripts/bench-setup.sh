#!/usr/bin/env bash
# Prepares what portkit-bench compares with beyond the toolchain: the D-Bus reference bus and
# its client library, dbus-broker (scale.idle-connections' baseline), and etcd (the cluster
# cases' directory), installed with apt-get when missing; and the bench's D-Bus peer, Benchmarks/dbus/portkit-dbus-peer.c,
# built to .build/dbus/portkit-dbus-peer, where portkit-bench looks for it
# (PORTKIT_DBUS_PEER overrides). Without them the bench skips its dbus and dbus-broker
# impls and says why.
#
#     scripts/bench-setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v dbus-daemon >/dev/null 2>&1 || ! command -v dbus-broker-launch >/dev/null 2>&1 \
    || ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists dbus-1 2>/dev/null \
    || ! command -v etcd >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bench-setup: dbus-daemon, dbus-broker, libdbus-1-dev, pkg-config or etcd-server is missing; install them as root" >&2
        exit 1
    fi
    apt-get update
    apt-get install -y dbus-daemon dbus-broker libdbus-1-dev pkg-config etcd-server
fi

mkdir -p .build/dbus
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -O2 -Wall -Wextra -Werror -o .build/dbus/portkit-dbus-peer Benchmarks/dbus/portkit-dbus-peer.c \
    $(pkg-config --cflags --libs dbus-1) -lpthread
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -O2 -Wall -Wextra -Werror -o .build/dbus/portkit-dbus-service Benchmarks/dbus/portkit-dbus-service.c \
    $(pkg-config --cflags --libs dbus-1)
echo "bench-setup: built .build/dbus/portkit-dbus-peer and .build/dbus/portkit-dbus-service"
