#!/usr/bin/env bash
# Builds the documentation site (`make docs`) with the toolchain's docc, no plugin: symbol graphs
# from the compiler, one archive per module (linked to the archives of the modules it depends on),
# the guides in Docs/ as articles, all merged into one static site in .build/docs/site.
# Any docc warning fails the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/.build/docs"
cd "$root"
rm -rf "$out"
mkdir -p "$out/graphs" "$out/archives"

swift package dump-symbol-graph --minimum-access-level public > "$out/symbol-graphs.log" 2>&1 \
    || { cat "$out/symbol-graphs.log"; exit 1; }
graphs=$(dirname "$(find .build -path '*/symbolgraph/LoopCore.symbols.json' -newer Package.swift | head -1)")

# Each module and the modules its documentation links to, in an order where those come first.
modules=(
    "LoopCore:"
    "EffectHandlers:LoopCore"
    "EventSources:LoopCore"
    "LoopRuntime:LoopCore EffectHandlers EventSources"
    "LoopPersistence:LoopCore EffectHandlers EventSources LoopRuntime"
    "LoopTesting:LoopCore EffectHandlers EventSources LoopRuntime LoopPersistence"
    "LoopJournal:LoopCore EffectHandlers LoopRuntime"
    "LoopPostgres:LoopCore EffectHandlers EventSources LoopRuntime LoopPersistence"
)
convert() {
    # convert NAME CATALOG GRAPH-DIR DEPENDENCY...
    local name=$1 catalog=$2 graphdir=$3
    shift 3
    local dependencies=()
    for dependency in "$@"; do dependencies+=(--dependency "$out/archives/$dependency.doccarchive"); done
    local graphs_option=()
    [ -n "$graphdir" ] && graphs_option=(--additional-symbol-graph-dir "$graphdir")
    docc convert "$catalog" "${graphs_option[@]}" \
        --output-path "$out/archives/$name.doccarchive" \
        --fallback-display-name "$name" --fallback-bundle-identifier "org.effectloop.$name" \
        --enable-experimental-external-link-support "${dependencies[@]}" \
        --transform-for-static-hosting --warnings-as-errors 2>&1 | tee "$out/$name.log"
    if grep -q "warning:\|error:" "$out/$name.log"; then
        echo "docs: docc reported problems in $name (see above)" >&2
        exit 1
    fi
}
all=()
for entry in "${modules[@]}"; do
    name=${entry%%:*}
    read -r -a dependencies <<< "${entry#*:}"
    mkdir -p "$out/graphs/$name"
    cp "$graphs/$name.symbols.json" "$out/graphs/$name/"
    for extension in "$graphs/$name@"*.symbols.json; do [ -e "$extension" ] && cp "$extension" "$out/graphs/$name/"; done
    convert "$name" "Sources/$name/$name.docc" "$out/graphs/$name" "${dependencies[@]}"
    all+=("$name")
done

# The guides: Docs/*.md, copied into the guides' catalog at build time (Docs/ stays the one copy),
# with links between guides turned into documentation links.
cp -R Docs/Site/EffectLoop.docc "$out/EffectLoop.docc"
for guide in Docs/*.md; do
    sed -E 's/\]\(([A-Za-z]+)\.md\)/](<doc:\1>)/g' "$guide" > "$out/EffectLoop.docc/$(basename "$guide")"
done
convert EffectLoop "$out/EffectLoop.docc" "" "${all[@]}"

docc merge $(for name in "${all[@]}"; do echo "$out/archives/$name.doccarchive"; done) "$out/archives/EffectLoop.doccarchive" \
    --output-path "$out/site" --synthesized-landing-page-name EffectLoop 2>&1 | tee "$out/merge.log"
! grep -q "warning:\|error:" "$out/merge.log"
echo "docs: built $out/site (serve it, then open /documentation/)"
