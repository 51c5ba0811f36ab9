#!/usr/bin/env bash
# Builds portnamed (and portnamed-cluster, which it becomes in cluster mode) and portname
# for release and installs them with their manual pages, shell completion and systemd
# units.
#
#   scripts/install.sh [--prefix PREFIX] [--destdir DESTDIR] [--no-build]
#
# PREFIX (default /usr/local) is where the files live once installed; DESTDIR (default
# empty) is prepended to every path written, for a package's staging tree. The binaries
# link the Swift runtime statically (--static-swift-stdlib): they run on a host without
# the Swift toolchain, and need glibc 2.36 or later, libstdc++ and OpenSSL 3 (libssl3)
# from the system.
# --no-build installs what an earlier run built.
#
# What goes where (PREFIX-relative):
#   bin/portnamed, bin/portnamed-cluster, bin/portname
#   share/man/man1/portname.1, share/man/man8/portnamed.8
#   share/bash-completion/completions/portname (and portnamed, a link to it)
#   share/zsh/site-functions/_portname
#   share/fish/vendor_completions.d/portname.fish (and portnamed.fish, a link to it)
#   lib/systemd/system/portnamed.{socket,service}   (ExecStart= the installed portnamed)
#   lib/systemd/user/portnamed.{socket,service}
#   share/portkit/systemd/cluster.conf              (a drop-in for cluster mode, not active)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"

prefix=/usr/local
destdir=
build=yes
while [ $# -gt 0 ]; do
    case $1 in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --destdir) destdir=${2:?--destdir needs a directory}; shift 2 ;;
    --no-build) build=no; shift ;;
    -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install.sh: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $prefix in
/*) ;;
*) echo "install.sh: --prefix must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
prefix=${prefix%/}

# A scratch path of its own: the static release objects stay apart from the debug ones
# and from other release builds. One product per build: `swift build --product A
# --product B` builds only B.
#
# Linked by lld (Packaging/lld-toolset.json) with packed relative relocations, whose
# table the loader reads at start-up in a few kilobytes where a plain one takes half a
# megabyte; the daemon also with its functions in the order Packaging/portnamed.order
# gives, so the code an idle daemon ran fills few pages (see Packaging/README.md).
scratch=.build/install
if [ $build = yes ]; then
    for product in portnamed portnamed-cluster portname; do
        link=()
        if [ "$product" = portnamed ]; then
            link=(-Xlinker "--symbol-ordering-file=$PWD/Packaging/portnamed.order" -Xlinker --no-warn-symbol-ordering)
        fi
        swift build -c release --static-swift-stdlib --scratch-path "$scratch" --product "$product" \
            --toolset Packaging/lld-toolset.json "${link[@]}"
    done
fi
bin=$(swift build -c release --static-swift-stdlib --scratch-path "$scratch" --show-bin-path --toolset Packaging/lld-toolset.json)

root=$destdir$prefix
install -Dm755 "$bin/portnamed" "$bin/portnamed-cluster" "$bin/portname" -t "$root/bin/"
install -Dm644 docs/man/portname.1 -t "$root/share/man/man1/"
install -Dm644 docs/man/portnamed.8 -t "$root/share/man/man8/"
install -Dm644 Packaging/completion/portname.bash "$root/share/bash-completion/completions/portname"
ln -sfn portname "$root/share/bash-completion/completions/portnamed"
install -Dm644 Packaging/completion/_portname -t "$root/share/zsh/site-functions/"
install -Dm644 Packaging/completion/portname.fish -t "$root/share/fish/vendor_completions.d/"
ln -sfn portname.fish "$root/share/fish/vendor_completions.d/portnamed.fish"

# The units name the daemon by its installed path.
unit() {
    mkdir -p "$(dirname "$2")"
    sed "s|/usr/local/bin/portnamed|$prefix/bin/portnamed|g" "$1" >"$2"
    chmod 644 "$2"
}
for scope in system user; do
    for file in portnamed.socket portnamed.service; do
        unit "Packaging/systemd/$scope/$file" "$root/lib/systemd/$scope/$file"
    done
done
unit Packaging/systemd/cluster.conf "$root/share/portkit/systemd/cluster.conf"

echo "installed portnamed, portnamed-cluster and portname under $root"
