# l4lb: `make demo` shows it working, `make test` runs the whole suite.
GO      ?= go
BIN     := bin
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
BUILD_DATE := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)
# Keep the whole suite well under CI's budget.
TEST_TIMEOUT ?= 14m

.PHONY: all build test generate generate-check demo bench bench-xdp lint clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/l4lb ./cmd/l4lb
	$(GO) build -o $(BIN)/testserver ./scripts/testserver

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

test: build lint generate-check
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

generate:
	$(GO) generate ./...

# The generated BPF objects and bindings are committed (go build needs no
# clang); CI regenerates them and fails when they differ from the C sources.
generate-check:
	GO=$(GO) scripts/generate-check.sh

demo: build
	scripts/demo.sh

bench: build
	scripts/bench.sh
	scripts/bench-xdp.sh

bench-xdp: build
	scripts/bench-xdp.sh

clean:
	rm -rf $(BIN)
