#!/usr/bin/env bash
# Checks the built site (`make docs-check`) in a real browser: serves it on 127.0.0.1, loads each
# module's landing page and a guide in headless Chromium (DocC pages are built by JavaScript, so only
# a browser shows whether they work), and fails unless each renders its title and its topic groups.
# Screenshots of a landing page and a guide go to .build/docs/screenshots.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
site="$root/.build/docs/site"
shots="$root/.build/docs/screenshots"
[ -d "$site" ] || { echo "docs-check: no site in $site; run make docs first" >&2; exit 1; }
if ! command -v chromium > /dev/null; then
    echo "docs-check: installing chromium (Debian's package)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq > /dev/null
    $sudo apt-get install -y -qq chromium > /dev/null
fi
mkdir -p "$shots"
work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
python3 -m http.server --bind 127.0.0.1 "$port" --directory "$site" > "$work/server.log" 2>&1 &
server=$!
cleanup() {
    kill "$server" 2> /dev/null || true
    wait "$server" 2> /dev/null || true
    pkill -f -- "--user-data-dir=$work/profile" 2> /dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/index.html')" 2> /dev/null && break
    sleep 0.1
done

browse() {
    # browse URL-PATH [--screenshot=FILE]: the page's DOM once its scripts have run.
    timeout 120 chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --user-data-dir="$work/profile" --hide-scrollbars --window-size=1280,1000 \
        --virtual-time-budget=20000 "${@:2}" "http://127.0.0.1:$port$1" 2> "$work/chromium.log"
}

failures=0
check() {
    # check URL-PATH TITLE TOPIC-GROUP...: the rendered page shows its title and every group.
    local path=$1 title=$2
    shift 2
    local dom
    dom=$(browse "$path" --dump-dom)
    local missing=()
    # The title DocC's scripts render (not the page's no-script notice).
    grep -qE "<h1[^>]*class=\"title\"[^>]*>(<span[^>]*>)?$title<" <<< "$dom" || missing+=("title '$title'")
    for group in "$@"; do grep -qF ">$group<" <<< "$dom" || missing+=("'$group'"); done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "docs-check: $path renders '$title' and $# topic groups or links"
    else
        echo "docs-check: $path is missing ${missing[*]}" >&2
        failures=$((failures + 1))
    fi
}
check /documentation/ EffectLoop "LoopCore" "LoopRuntime" "EffectLoop Guides"
check /documentation/loopcore/ LoopCore "Programs" "Sending events"
check /documentation/effecthandlers/ EffectHandlers "Routing effects" "Handlers"
check /documentation/eventsources/ EventSources "Sources" "Combining sources"
check /documentation/loopruntime/ LoopRuntime "Running programs" "Observing"
check /documentation/looptesting/ LoopTesting "Specs of the update" "Running loops in tests"
check /documentation/looppersistence/ LoopPersistence "Durable loops" "Event stores" "Codecs"
check /documentation/loopjournal/ LoopJournal "Recording" "Reading and replaying"
check /documentation/looppostgres/ LoopPostgres "Storing events"
check /documentation/effectloop/ "EffectLoop Guides" "Start here" "Running services"
check /documentation/effectloop/persistence "Persistence: durable loops" "The guarantees" "The file store"

browse /documentation/loopruntime/ --screenshot="$shots/loopruntime.png" > /dev/null
browse /documentation/effectloop/persistence --screenshot="$shots/persistence-guide.png" > /dev/null
for shot in loopruntime persistence-guide; do
    [ -s "$shots/$shot.png" ] || { echo "docs-check: no screenshot $shots/$shot.png" >&2; failures=$((failures + 1)); }
done
[ "$failures" -eq 0 ] || { echo "docs-check: $failures problem(s)" >&2; exit 1; }
echo "docs-check: every page rendered; screenshots in $shots"
