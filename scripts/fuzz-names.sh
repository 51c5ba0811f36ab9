#!/usr/bin/env bash
# Fuzzes the name protocol: the server's frame reader and field decoders, and a real name
# server's request handling, with libFuzzer + AddressSanitizer for a bounded time. Every
# input goes through real sockets with descriptors attached (Fuzz/FuzzNames.swift).
#
#   scripts/fuzz-names.sh [seconds]      (default 60)
#
# Environment: FUZZ_RUNS caps the number of executions (default 100000000), SWIFTC and
# CLANG pick the compilers. Exits non-zero if the build fails or the fuzzer finds a crash;
# the crashing input is kept under .build/fuzz-artifacts/.
#
# The modules are compiled directly with swiftc, not through SwiftPM, because a SwiftPM
# executable built with -sanitize=fuzzer fails to link (docs/WIRE.md).
set -euo pipefail

seconds="${1:-60}"
runs="${FUZZ_RUNS:-100000000}"
swiftc="${SWIFTC:-swiftc}"
clang="${CLANG:-$(dirname "$(command -v "$swiftc")")/clang}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# A crash in a fuzz target must end the run at once: the Swift backtracer can take minutes.
export SWIFT_BACKTRACE=enable=no

build=.build/fuzz-names-modules
mkdir -p "$build" .build/fuzz-artifacts
cat > "$build/module.modulemap" <<MAP
module CPortKitSystem {
    header "$root/Sources/CPortKitSystem/include/CPortKitSystem.h"
    export *
}
MAP

echo "building .build/fuzz-names"
for c in Sources/CPortKitSystem/*.c; do
    "$clang" -c -O1 -fsanitize=fuzzer-no-link,address -I Sources/CPortKitSystem/include "$c" -o "$build/$(basename "$c" .c).o"
done
module() { # module NAME SOURCE_DIRECTORY: one sanitized object and its .swiftmodule
    "$swiftc" -sanitize=fuzzer,address -parse-as-library -O -swift-version 6 -enable-testing \
        -package-name PortKit -module-name "$1" -I "$build" -Xcc -fmodule-map-file="$build/module.modulemap" \
        -wmo -c $(find "$2" -name '*.swift' | sort) -o "$build/$1.o" \
        -emit-module -emit-module-path "$build/$1.swiftmodule"
}
module PortKitLocks Sources/PortKitLocks
module PortKitSystem Sources/PortKitSystem
module PermanentThread Sources/PermanentThread
module PortMessaging Sources/PortMessaging
module NamedPortServer Sources/NamedPortServer
"$swiftc" -sanitize=fuzzer,address -parse-as-library -O -swift-version 6 \
    -package-name PortKit -module-name FuzzNames -I "$build" -Xcc -fmodule-map-file="$build/module.modulemap" \
    Fuzz/FuzzNames.swift "$build"/PortKitLocks.o "$build"/PortKitSystem.o "$build"/PermanentThread.o "$build"/PortMessaging.o "$build"/NamedPortServer.o "$build"/shim.o "$build"/process.o \
    -o .build/fuzz-names

# Seed corpus: raw frames (mode byte 0) and built requests (mode byte 1: operation, field
# count, then length-prefixed fields; 0xFE an 8-byte integer, 0xFF a port).
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
corpus="$work/corpus"
mkdir -p "$corpus"
printf '\x01\x06\x00' > "$corpus/list"
printf '\x01\x04\x02\x0afuzz.owner\xfe\x00\x00\x00\x00\x00\x00\x00\x00' > "$corpus/lookup"
printf '\x03\x02\x02\x05fuzz.\xff' > "$corpus/register-with-channel"
printf '\x01\x07\x03\xfe\x01\x00\x00\x00\x00\x00\x00\x00\x05fuzz.\xfe\x00\x00\x00\x00\x00\x00\x00\x00' > "$corpus/watch"
printf '\x01\x04\x02\x04late\xfe\x10\x27\x00\x00\x00\x00\x00\x00\x02\x01\x04late' > "$corpus/wait-then-register"
printf '\x00PKWF\x01\x01\x00\x00\x20\x00\x00\x00\x06\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00' \
    > "$corpus/raw-list"

cat > "$work/names.dict" <<'DICT'
"PKWF\x01"
"fuzz.owner"
"\xfe\x00\x00\x00\x00\x00\x00\x00\x00"
"\xff"
"\x03\x00\x00\x00\x00\x00\x00\x00"
DICT

echo "fuzzing for ${seconds}s (at most $runs runs)"
status=0
# No per-input leak check: the server's thread allocates and frees on its own schedule, so
# libFuzzer's malloc accounting would run LeakSanitizer after most inputs (five times
# slower); the harness checks descriptors and the server's holdings itself.
# Nor one at exit: the harness keeps its server and client for the process's life, and
# LeakSanitizer does not see a reference that a Swift enum keeps with its case in the
# pointer's spare bits (a send port's connection), so it would report those as leaks.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
.build/fuzz-names "$corpus" -dict="$work/names.dict" -detect_leaks=0 \
    -max_total_time="$seconds" -runs="$runs" -max_len=4096 -timeout=30 -rss_limit_mb=2048 \
    -artifact_prefix=.build/fuzz-artifacts/ -print_final_stats=1 || status=$?
if [ "$status" -ne 0 ]; then
    echo "fuzz-names: the fuzzer failed (exit $status); see .build/fuzz-artifacts/" >&2
fi
exit "$status"
