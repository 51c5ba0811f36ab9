#!/usr/bin/env bash
# Fuzzes the PortMessaging wire codec (decoder, re-encode round trip, stream splitter)
# with libFuzzer + AddressSanitizer for a bounded time.
#
#   scripts/fuzz-codec.sh [seconds]      (default 60)
#
# Environment: FUZZ_RUNS caps the number of executions (default 100000000),
# SWIFTC picks the compiler. Exits non-zero if the build fails or the fuzzer finds a
# crash; the crashing input is kept under .build/fuzz-artifacts/.
#
# The Wire sources are compiled directly with swiftc, not through SwiftPM, because a
# SwiftPM executable built with -sanitize=fuzzer fails to link (docs/WIRE.md, TOOLCHAIN.md).
set -euo pipefail

seconds="${1:-60}"
runs="${FUZZ_RUNS:-100000000}"
swiftc="${SWIFTC:-swiftc}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# A crash in a fuzz target must end the run at once: the Swift backtracer can take minutes.
export SWIFT_BACKTRACE=enable=no

mkdir -p .build/fuzz-artifacts
echo "building .build/fuzz-codec"
"$swiftc" -sanitize=fuzzer,address -parse-as-library -O -swift-version 6 \
    -package-name PortKit -module-name FuzzCodec \
    Sources/PortMessaging/Wire/*.swift Fuzz/FuzzCodec.swift -o .build/fuzz-codec

# Seed corpus: a few valid frames, written byte by byte from the layout in docs/WIRE.md,
# so the fuzzer starts from inputs that get past the header.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
corpus="$work/corpus"
mkdir -p "$corpus"

le() { # le BYTES VALUE: VALUE as BYTES little-endian bytes, as printf escapes
    local n=$1 v=$2 i out=""
    for ((i = 0; i < n; i++)); do out+=$(printf '\\x%02x' $(((v >> (8 * i)) & 255))); done
    printf '%s' "$out"
}
header() { # header KIND LENGTH ID SEQUENCE COMPONENTS DESCRIPTORS REPLY
    printf 'PKWF\\x01%s%s%s%s%s%s%s%s%s' "$(le 1 "$1")" "$(le 2 0)" "$(le 4 "$2")" \
        "$(le 4 "$3")" "$(le 8 "$4")" "$(le 2 "$5")" "$(le 2 "$6")" "$(le 2 "$7")" "$(le 2 0)"
}
bytes_component() { printf '\\x00%s%s' "$(le 4 ${#1})" "$1"; }
index_component() { printf '%s%s' "$(le 1 "$1")" "$(le 4 "$2")"; }  # TAG INDEX

printf "$(header 0 32 1 0 0 0 65535)" > "$corpus/empty"
printf "$(header 0 39 7 0 1 0 65535)$(bytes_component hi)" > "$corpus/bytes"
printf "$(header 2 47 9 42 2 0 65535)$(bytes_component '')$(bytes_component abcde)" > "$corpus/reply"
printf "$(header 1 55 3 5 4 3 0)$(index_component 1 1)$(bytes_component abc)$(index_component 2 2)$(bytes_component '')" \
    > "$corpus/request-with-ports"
cat "$corpus/bytes" "$corpus/request-with-ports" "$corpus/empty" > "$corpus/stream"
printf 'PKWF\x01\x00\x00\x00' > "$corpus/prefix"

# Tokens worth splicing in: the magic with the version, the no-reply-port value, the tags.
cat > "$work/wire.dict" <<'DICT'
"PKWF\x01"
"\xff\xff"
"\x00\x00\x00\x00"
"\x01\x00\x00\x00\x00"
"\x02\x00\x00\x00\x00"
DICT

echo "fuzzing for ${seconds}s (at most $runs runs)"
status=0
.build/fuzz-codec "$corpus" -dict="$work/wire.dict" \
    -max_total_time="$seconds" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix=.build/fuzz-artifacts/ -print_final_stats=1 || status=$?
if [ "$status" -ne 0 ]; then
    echo "fuzz-codec: the fuzzer failed (exit $status); see .build/fuzz-artifacts/" >&2
fi
exit "$status"
