#!/usr/bin/env bash
# Writes Packaging/portnamed.order: the functions an installed portnamed runs while it
# starts, serves a short session of clients and idles, one linker symbol per line.
#
#   scripts/portnamed-order.sh
#
# scripts/install.sh links portnamed with this file as lld's --symbol-ordering-file, which
# puts those functions next to each other at the start of the binary's code. The kernel
# maps a binary's code in windows around each page it first touches, so functions spread
# over the Swift runtime's several megabytes keep most of them resident in an idle daemon;
# packed together they keep only the pages they fill (Packaging/README.md has the figures).
#
# How: portnamed as install.sh builds it, a copy without debug information (which
# valgrind cannot read), run under callgrind while the portname of the same build lists,
# serves, looks up, sends and watches. Needs valgrind and python3. Run it again
# when portnamed's code changes much; a symbol that no longer exists is skipped by the
# linker, and a function missing from the list only costs its page.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"

work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
# The build install.sh makes, installed into a scratch prefix: what is profiled is what
# is installed.
scripts/install.sh --prefix "$work/prefix" >/dev/null
bin=$work/prefix/bin
strip -g -o "$work/portnamed" "$bin/portnamed"
address=$work/names.sock
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/callgrind.out" \
    "$work/portnamed" --address "$address" --log-level debug >"$work/daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 300); do [ -S "$address" ] && break; sleep 0.1; done
[ -S "$address" ] || { cat "$work/daemon.log" >&2; echo "portnamed-order: the daemon did not start" >&2; exit 1; }

client() { "$bin/portname" --address "$address" "$@"; }
client status >/dev/null
client list >/dev/null
client list --json >/dev/null
"$bin/portname" --address "$address" serve order.demo --echo >/dev/null &
server=$!
client lookup order.demo --wait 30 >/dev/null
client send order.demo --timeout 30 hello >/dev/null
client status order.demo >/dev/null
client lookup order.missing >/dev/null || true
timeout 2 "$bin/portname" --address "$address" watch order. >/dev/null || true
kill "$server"; wait "$server" || true
client list >/dev/null
kill -TERM "$daemon"; wait "$daemon" || true

python3 - "$work/callgrind.out" "$work/portnamed" >Packaging/portnamed.order <<'EOF'
# Prints, once each and in the order callgrind lists them, the functions it counted in
# the daemon's own binary.
import re, sys
out, binary = sys.argv[1], sys.argv[2]
objects, functions, current, seen = {}, {}, None, set()
for line in open(out):
    line = line.rstrip("\n")
    m = re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", line)
    if m:
        kind, key, name = m.groups()
        if name: objects[key] = name
        if kind == "ob": current = objects[key]
        continue
    m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
    if m:
        kind, key, name = m.groups()
        if name: functions[key] = name
        symbol = functions[key]
        if kind == "fn" and current == binary and symbol not in seen and not symbol.startswith("0x"):
            seen.add(symbol)
            print(symbol)
EOF
echo "portnamed-order: $(wc -l <Packaging/portnamed.order) functions in Packaging/portnamed.order"
