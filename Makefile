# Loom — build, run, test. The toolchain is the installed Go; never download another.
export GOTOOLCHAIN := local

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN     := bin/loom

.PHONY: all build run test vet fmt-check clients unit bench fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/loom

# Runs `loom serve` with the demo-ready ./loom.toml on 127.0.0.1:8080, data in ./data.
run: build
	./$(BIN) serve

# Everything CI runs: formatting, vet, and every test (race detector on).
test: fmt-check vet clients unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Installs the pinned RxDB client (clients/rxdb) that TestRxDB_RealClient runs;
# npm ci only when node_modules is missing or older than package-lock.json.
clients:
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "npm not found: the RxDB client compatibility test will be skipped"; \
	elif [ ! -f clients/rxdb/node_modules/.package-lock.json ] || [ clients/rxdb/package-lock.json -nt clients/rxdb/node_modules/.package-lock.json ]; then \
		cd clients/rxdb && npm ci --no-audit --no-fund; \
	fi

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# Benchmarks: engine (go test -bench) and REST (loom bench); see BENCHMARKS.md.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./collections/sqlite/ ./access/ ./server/
	./$(BIN) bench --clients 64 --duration 5s

# Short fuzzing pass over every parser.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDocPath -fuzztime 20s ./collections/
	$(GO) test -run '^$$' -fuzz FuzzParseQuery -fuzztime 20s ./collections/
	$(GO) test -run '^$$' -fuzz FuzzCursor -fuzztime 20s ./collections/
	$(GO) test -run '^$$' -fuzz FuzzApplyPatch -fuzztime 20s ./collections/
	$(GO) test -run '^$$' -fuzz FuzzDocumentBody -fuzztime 20s ./server/
	$(GO) test -run '^$$' -fuzz FuzzWSMessage -fuzztime 20s ./server/
	$(GO) test -run '^$$' -fuzz FuzzSealedCursor -fuzztime 20s ./access/
	$(GO) test -run '^$$' -fuzz FuzzCompile -fuzztime 20s ./internal/pathpattern/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./rules/
	$(GO) test -run '^$$' -fuzz FuzzParseFile -fuzztime 20s ./triggers/
	$(GO) test -run '^$$' -fuzz FuzzAuthenticate -fuzztime 20s ./internal/auth/
	$(GO) test -run '^$$' -fuzz FuzzRefresh -fuzztime 20s ./internal/auth/
	$(GO) test -run '^$$' -fuzz FuzzCheckIP -fuzztime 20s ./internal/ssrf/
	$(GO) test -run '^$$' -fuzz FuzzCalculator -fuzztime 20s ./webhooks/tools/
	$(GO) test -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 20s ./webhooks/
	$(GO) test -run '^$$' -fuzz FuzzDeriveID -fuzztime 20s ./webhooks/

clean:
	rm -rf bin

# Regenerates the console screenshots in docs/console/ (the README shows
# them): the browser scenarios save one per page (t.shot) while they run.
# Needs Node and Chromium, as the browser tests do; make test never writes them.
.PHONY: screenshots
screenshots:
	LOOM_REQUIRE_BROWSER=1 LOOM_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run TestConsoleBrowser ./console/
