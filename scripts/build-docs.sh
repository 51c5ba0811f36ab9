#!/usr/bin/env bash
# Builds the API reference with the toolchain alone: the library modules are built,
# their symbol graphs extracted (public symbols), and each module's DocC catalog converted
# with them; the archives are then merged into one. Fails on any documentation
# warning. Output: .build/docs/PortKit.doccarchive (a static site; serve it over HTTP).
#
#   scripts/build-docs.sh [OUTPUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"

out="${1:-.build/docs}"
modules=(PermanentThread PortMessaging NamedPortServer PortCluster PortActors)
triple="$(uname -m)-unknown-linux-gnu"

swift build --target NamedPortServer --target PortCluster
swift build --target PortActors
bin="$(swift build --show-bin-path)"

rm -rf "$out"
mkdir -p "$out/symbols" "$out/logs"
warnings=0
archives=()
for module in "${modules[@]}"; do
    graphs="$out/symbols/$module"
    mkdir -p "$graphs"
    swift-symbolgraph-extract -module-name "$module" -target "$triple" \
        -I "$bin/Modules" -I Sources/CPortKitSystem/include \
        -Xcc "-fmodule-map-file=$bin/CPortKitSystem.build/module.modulemap" \
        -Xcc "-fmodule-map-file=Sources/COpenSSL/module.modulemap" \
        -minimum-access-level public -skip-inherited-docs -output-dir "$graphs"
    log="$out/logs/$module.log"
    docc convert "Sources/$module/$module.docc" \
        --additional-symbol-graph-dir "$graphs" \
        --fallback-display-name "$module" --fallback-bundle-identifier "org.portkit.$module" \
        --output-path "$out/$module.doccarchive" 2>&1 | tee "$log"
    if grep -qE "^(warning|error):|: (warning|error):" "$log"; then warnings=1; fi
    archives+=("$out/$module.doccarchive")
done

docc merge "${archives[@]}" --synthesized-landing-page-name PortKit \
    --output-path "$out/PortKit.doccarchive" 2>&1 | tee "$out/logs/merge.log"
if grep -qE "^(warning|error):|: (warning|error):" "$out/logs/merge.log"; then warnings=1; fi

if [ "$warnings" -ne 0 ]; then
    echo "build-docs: documentation warnings (see above and $out/logs)" >&2
    exit 1
fi
echo "build-docs: $out/PortKit.doccarchive"
