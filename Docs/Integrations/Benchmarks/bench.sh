#!/usr/bin/env bash
# `make integrations-bench`: the example service's throughput and latency under wrk with 8 connections,
# RUNS runs (default 5) of SECONDS_PER_RUN seconds (default 5) per workload, each run against a fresh
# service process (and, when durable, a fresh file store). Prints one JSON object per workload: the
# medians of requests/s, p50 and p99 (milliseconds), with each one's min and max over the runs.
#
#   http_floor        GET /health, which touches no account: the HTTP server's own ceiling
#   http_memory       deposits into 1,000 in-memory accounts (--memory): the same update, no store
#   http_durable      deposits into 1,000 durable accounts on the file store, each answered after commit
#   http_durable_hot  deposits into one durable account: every request queues on one entity
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS=${RUNS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
BENCH=Docs/Integrations/Benchmarks
command -v wrk >/dev/null || { echo "wrk is not installed: make integrations-bench installs it" >&2; exit 1; }
swift build -c release --package-path Docs/Integrations --scratch-path .build-integrations --product accounts-service >&2
BIN=.build-integrations/release/accounts-service
SCRATCH=$(mktemp -d /tmp/effectloop-http-bench-XXXXXX)
SERVICE=
cleanup() { [ -n "$SERVICE" ] && kill -9 "$SERVICE" 2>/dev/null; rm -rf "$SCRATCH"; }
trap cleanup EXIT

# run_once PATHS ACCOUNTS SERVICE-ARGS...: one wrk run against a new service; prints wrk's RESULT JSON.
run_once() {
  # Runs in a command substitution's subshell, which has its own SERVICE and does not run the
  # script's EXIT trap: it stops its own service, however it ends.
  trap '[ -n "$SERVICE" ] && kill -9 "$SERVICE" 2>/dev/null' EXIT
  local paths=$1 accounts=$2; shift 2
  rm -rf "$SCRATCH/store"; : > "$SCRATCH/log"
  "$BIN" --port 0 "$@" > "$SCRATCH/log" 2>&1 & SERVICE=$!
  local port=
  for _ in $(seq 1000); do
    port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$SCRATCH/log" | tail -1)
    [ -n "$port" ] && break
    kill -0 "$SERVICE" 2>/dev/null || { cat "$SCRATCH/log" >&2; exit 1; }
    sleep 0.01
  done
  [ -n "$port" ] || { echo "the service did not start" >&2; cat "$SCRATCH/log" >&2; exit 1; }
  local out
  out=$(PATHS=$paths ACCOUNTS=$accounts wrk -t2 -c8 -d"${SECONDS_PER_RUN}s" --latency -s "$BENCH/workload.lua" \
    "http://127.0.0.1:$port")
  kill -TERM "$SERVICE"
  wait "$SERVICE" || { echo "the service did not stop cleanly" >&2; cat "$SCRATCH/log" >&2; exit 1; }
  SERVICE=
  echo "$out" | sed -n 's/^RESULT //p'
}

# field JSON NAME: a number field of a one-line JSON object.
field() { sed -n "s/.*\"$2\":\([-0-9.e]*\).*/\1/p" <<< "$1"; }

# stats VALUES...: "median min max" of the values.
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s %s %s", m, v[1], v[NR] }'; }

workload() {
  local name=$1; shift
  local rates=() p50s=() p99s=()
  for _ in $(seq "$RUNS"); do
    local result; result=$(run_once "$@")
    local failed; failed=$(field "$result" failed)
    [ "$failed" = 0 ] || { echo "$name: $failed requests failed (non-2xx or socket errors): $result" >&2; exit 1; }
    rates+=("$(field "$result" per_sec)"); p50s+=("$(field "$result" p50_ms)"); p99s+=("$(field "$result" p99_ms)")
  done
  read -r rate rate_min rate_max <<< "$(stats "${rates[@]}")"
  read -r p50 p50_min p50_max <<< "$(stats "${p50s[@]}")"
  read -r p99 p99_min p99_max <<< "$(stats "${p99s[@]}")"
  printf '{"workload":"%s","runs":%d,"per_sec":%s,"per_sec_min":%s,"per_sec_max":%s,"p50_ms":%s,"p50_ms_min":%s,"p50_ms_max":%s,"p99_ms":%s,"p99_ms_min":%s,"p99_ms_max":%s}\n' \
    "$name" "$RUNS" "$rate" "$rate_min" "$rate_max" "$p50" "$p50_min" "$p50_max" "$p99" "$p99_min" "$p99_max"
}

workload http_floor health 1 --memory
workload http_memory deposits 1000 --memory
workload http_durable deposits 1000 --store "$SCRATCH/store"
workload http_durable_hot deposits 1 --store "$SCRATCH/store"
