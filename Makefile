# Every target is a one-liner; strictness lives here so it is in one place.
STRICT := -Xswiftc -warnings-as-errors -Xswiftc -require-explicit-sendable --explicit-target-dependency-import-check error
FMT_OPTIONS := --configuration .swiftformat --recursive
SOURCES := Package.swift Sources Tests

.PHONY: build test test-tsan lint format bench bench-quick demo

build: ; swift build $(STRICT)
test: ; swift test $(STRICT)
test-tsan: ; TSAN_OPTIONS=halt_on_error=1 swift test $(STRICT) --sanitize=thread --scratch-path .build-tsan
demo: ; swift run -c release loop-demo
bench: ; swift run -c release loop-bench
bench-quick: ; swift run -c release loop-bench --quick
lint: ; swift format lint --strict $(FMT_OPTIONS) $(SOURCES)
format: ; swift format format --in-place $(FMT_OPTIONS) $(SOURCES)
