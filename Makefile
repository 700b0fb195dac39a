# Every target is a one-liner; strictness lives here so it is in one place.
STRICT := -Xswiftc -warnings-as-errors -Xswiftc -require-explicit-sendable --explicit-target-dependency-import-check error
FMT_OPTIONS := --configuration .swiftformat --recursive
SOURCES := Package.swift Sources Tests

.PHONY: build test lint format

build: ; swift build $(STRICT)
test: ; swift test $(STRICT)
lint: ; swift format lint --strict $(FMT_OPTIONS) $(SOURCES)
format: ; swift format format --in-place $(FMT_OPTIONS) $(SOURCES)
