# Every target is a one-liner; strictness lives here so it is in one place.
STRICT := -Xswiftc -warnings-as-errors -Xswiftc -require-explicit-sendable --explicit-target-dependency-import-check error
FMT := swift format --configuration .swiftformat --recursive
SOURCES := Package.swift Sources Tests

.PHONY: build test lint format

build: ; swift build $(STRICT)
test: ; swift test $(STRICT)
lint: ; $(FMT) lint --strict $(SOURCES)
format: ; $(FMT) format --in-place $(SOURCES)
