# Every target is a one-liner; strictness lives here so it is in one place.
STRICT := -Xswiftc -warnings-as-errors -Xswiftc -require-explicit-sendable --explicit-target-dependency-import-check error
FMT_OPTIONS := --configuration .swiftformat --recursive
SOURCES := Package.swift Sources Tests Docs/Integrations/Package.swift Docs/Integrations/Sources Docs/Integrations/Tests

deps_note := PostgreSQL (server and libpq-dev) is needed by LoopPostgres and its tests
# The nested package of adapters to the server-side Swift stack (Docs/Integrations), in its own scratch folder.
INTEGRATIONS := --package-path Docs/Integrations --scratch-path .build-integrations
.PHONY: deps integrations integrations-bench demo-cluster build test test-tsan test-asan lint format bench bench-quick bench-locks demo docs docs-check

# libpq-dev (to build LoopPostgres) and the PostgreSQL server (its tests start a throwaway one), from apt
# when missing; as root directly, otherwise through sudo. Without either, install them yourself, or point
# the tests at a server with EFFECTLOOP_POSTGRES (see README).
deps: ; @pkg-config --exists libpq && ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { echo "== installing $(deps_note)"; S=$$([ "$$(id -u)" = 0 ] || echo sudo); $$S apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$S apt-get install -y -qq postgresql libpq-dev >/dev/null; }
build: deps ; swift build $(STRICT)
test: deps ; swift test $(STRICT)
integrations: deps ; swift build $(STRICT) $(INTEGRATIONS) && swift test $(STRICT) $(INTEGRATIONS)
# The example HTTP service under wrk (installed from apt when missing): one JSON line per workload.
integrations-bench: deps ; @command -v wrk >/dev/null || { S=$$([ "$$(id -u)" = 0 ] || echo sudo); $$S apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$S apt-get install -y -qq wrk >/dev/null; }; bash Docs/Integrations/Benchmarks/bench.sh
test-tsan: deps ; EFFECTLOOP_SANITIZED=1 TSAN_OPTIONS=halt_on_error=1 swift test $(STRICT) --sanitize=thread --scratch-path .build-tsan
# The scenario fails two jobs on purpose, so loop-demo exits 1 ("some job failed"): that is success here.
demo: deps ; swift run -c release loop-demo || [ $$? -eq 1 ]
# The job runner as a cluster of three nodes on a throwaway PostgreSQL server; one node is killed mid-run.
demo-cluster: deps ; swift run -c release loop-demo cluster-demo
# A failure with leaks ends by repeating where each direct leak was allocated (.ci/asan-leaks).
test-asan: deps ; EFFECTLOOP_SANITIZED=1 LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan-suppressions bash .ci/asan-leaks swift test $(STRICT) --sanitize=address --scratch-path .build-asan
bench: deps ; swift run -c release loop-bench
bench-quick: deps ; swift run -c release loop-bench --quick
# Lock acquisitions per event -> effect -> event round trip (a build that counts them; not a speed figure).
bench-locks: ; for w in w2 w2s; do swift run -c release -Xswiftc -DEFFECTLOOP_COUNT_LOCKS --scratch-path .build-locks loop-bench --quick --only $$w || exit 1; done
# The documentation site (docc, no plugin) in .build/docs/site; docs-check opens it in headless Chromium.
docs: deps ; bash Docs/Site/build.sh
docs-check: docs ; bash Docs/Site/check.sh
# The format, and that Docs/Architecture.md's module table says what Package.swift declares.
lint: ; swift format lint --strict $(FMT_OPTIONS) $(SOURCES) && swift package dump-package | swift .ci/architecture-check.swift && swift .ci/guide-check.swift
format: ; swift format format --in-place $(FMT_OPTIONS) $(SOURCES)

# Fuzzing: each target runs FUZZ_SECONDS from the committed seeds in Tests/Fuzz/, under ASan.
FUZZ_SECONDS ?= 60
FUZZ_BUILD := swift build --sanitize=fuzzer --sanitize=address -Xswiftc -DFUZZING --scratch-path .build-fuzz
.PHONY: fuzz
fuzz: ; for t in commands journal; do $(FUZZ_BUILD) --product fuzz-$$t && mkdir -p .build-fuzz/corpus-$$t && .build-fuzz/debug/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 .build-fuzz/corpus-$$t Tests/Fuzz/$$t || exit 1; done
