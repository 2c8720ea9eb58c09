# Loom — build, run, test. The toolchain is the installed Go; never download another.
export GOTOOLCHAIN := local

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN     := bin/loom

.PHONY: all build run test vet fmt-check clients console-deps console console-check unit bench fuzz mutate clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/loom

# Runs `loom serve` with the demo-ready ./loom.toml on 127.0.0.1:8080, data in ./data.
run: build
	./$(BIN) serve

# Everything CI runs: formatting, vet, and every test (race detector on).
test: fmt-check vet clients console-check unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Installs the pinned RxDB client (clients/rxdb) that TestRxDB_RealClient runs;
# npm ci only when node_modules is missing or older than package-lock.json.
# Without npm it skips with one line, except under CI=true or
# LOOM_REQUIRE_BROWSER=1 (.ci/run): CI must not go green by skipping the test.
clients:
	@if ! command -v npm >/dev/null 2>&1; then \
		if [ "$$CI" = true ] || [ "$$CI" = 1 ] || [ "$$LOOM_REQUIRE_BROWSER" = 1 ]; then echo "npm not found and CI=$$CI LOOM_REQUIRE_BROWSER=$$LOOM_REQUIRE_BROWSER: install Node 20+ and npm (the RxDB client test is required)"; exit 1; fi; \
		echo "npm not found: the RxDB client compatibility test will be skipped"; \
	elif [ ! -f clients/rxdb/node_modules/.package-lock.json ] || [ clients/rxdb/package-lock.json -nt clients/rxdb/node_modules/.package-lock.json ]; then \
		cd clients/rxdb && npm ci --no-audit --no-fund; \
	fi

# The console (console/): its built assets are committed in console/dist and
# embedded in the binary, so `make build` and `make run` need no Node.
# console-deps installs the pinned esbuild, Preact and playwright-core (no
# browser download: the browser tests drive Debian's chromium).
# npm ci runs only when node_modules is missing or older than package-lock.json;
# LOOM_REQUIRE_BROWSER=1 (CI) makes a missing npm then a failure, not a skip.
console-deps:
	@if [ -f console/node_modules/.package-lock.json ] && [ ! console/package-lock.json -nt console/node_modules/.package-lock.json ]; then \
		:; \
	elif ! command -v npm >/dev/null 2>&1; then \
		if [ "$$LOOM_REQUIRE_BROWSER" = 1 ]; then echo "npm not found and LOOM_REQUIRE_BROWSER=1: install Node 20+ and npm"; exit 1; fi; \
		echo "npm not found: the console build check and browser tests will be skipped"; \
	else \
		cd console && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund; \
	fi

# Rebuilds console/dist from console/src; commit the result.
console: console-deps
	cd console && node build.mjs

# The committed console/dist must be exactly what the sources build to.
console-check: console-deps
	@if ! command -v node >/dev/null 2>&1; then \
		if [ "$$LOOM_REQUIRE_BROWSER" = 1 ]; then echo "node not found and LOOM_REQUIRE_BROWSER=1: the console/dist freshness check cannot run"; exit 1; fi; \
		echo "node not found: skipping the console/dist freshness check"; \
	else \
		tmp=$$(mktemp -d) || exit 1; \
		if ! (cd console && OUT=$$tmp node build.mjs >/dev/null); then \
			rm -rf $$tmp; echo "console build failed: console/dist cannot be checked"; exit 1; \
		fi; \
		if ! diff -r $$tmp console/dist >/dev/null; then \
			echo "console/dist is stale: run 'make console' and commit console/dist"; diff -r $$tmp console/dist | head -20; rm -rf $$tmp; exit 1; \
		fi; rm -rf $$tmp; echo "console/dist matches a fresh build of console/src"; \
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
	$(GO) test -run '^$$' -fuzz FuzzConsoleSession -fuzztime 20s ./server/
	$(GO) test -run '^$$' -fuzz FuzzSealedCursor -fuzztime 20s ./access/
	$(GO) test -run '^$$' -fuzz FuzzCompile -fuzztime 20s ./internal/pathpattern/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./rules/
	$(GO) test -run '^$$' -fuzz FuzzParseFile -fuzztime 20s ./triggers/
	$(GO) test -run '^$$' -fuzz FuzzAuthenticate -fuzztime 20s ./internal/auth/
	$(GO) test -run '^$$' -fuzz FuzzRefresh -fuzztime 20s ./internal/auth/
	$(GO) test -run '^$$' -fuzz FuzzConsoleCookie -fuzztime 20s ./internal/auth/
	$(GO) test -run '^$$' -fuzz FuzzCheckIP -fuzztime 20s ./internal/ssrf/
	$(GO) test -run '^$$' -fuzz FuzzCalculator -fuzztime 20s ./webhooks/tools/
	$(GO) test -run '^$$' -fuzz FuzzDecodeEvent -fuzztime 20s ./webhooks/
	$(GO) test -run '^$$' -fuzz FuzzDeriveID -fuzztime 20s ./webhooks/
	$(GO) test -run '^$$' -fuzz '^FuzzTokenScope$$' -fuzztime 20s ./triggers/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRule$$' -fuzztime 20s ./webhooks/plugins/
	$(GO) test -run '^$$' -fuzz '^FuzzParseManifest$$' -fuzztime 20s ./webhooks/plugins/
	$(GO) test -run '^$$' -fuzz '^FuzzUserSettings$$' -fuzztime 20s ./webhooks/plugins/
	$(GO) test -run '^$$' -fuzz '^FuzzCELCondition$$' -fuzztime 20s ./webhooks/plugins/
	$(GO) test -run '^$$' -fuzz '^FuzzTemplate$$' -fuzztime 20s ./webhooks/plugins/
	$(GO) test -run '^$$' -fuzz '^FuzzLuaScript$$' -fuzztime 20s ./webhooks/plugins/
	$(GO) test -run '^$$' -fuzz '^FuzzLuaPattern$$' -fuzztime 20s ./webhooks/plugins/

# Mutation testing (not part of `make test`: it reruns a package's tests once
# per mutant, minutes to hours). gremlins is pinned and built from the Go module
# proxy into bin/tools on first use, outside the main module's go.mod.
#   make mutate                  all packages that carry the README's promises
#   make mutate PKG=./rules      one package (several: PKG="./rules ./access")
# Per package, the full report (every LIVED mutant with file:line) goes to
# bin/mutate/<pkg>.txt and the JSON to bin/mutate/<pkg>.json; a summary line per
# package to bin/mutate/summary.txt and stdout. The README's "Mutation testing"
# paragraph records the scores. MUTATE_WORKERS / MUTATE_TIMEOUT_COEFF tune the
# run: a mutant whose tests take longer than COEFF x the coverage run is TIMED
# OUT (counted neither killed nor lived). -count=1: a cached coverage run would
# time that run at a fraction of a second, and every mutant out with it. The
# builds of a run go to a temporary GOCACHE (outside the module, which gremlins
# copies), removed after it: every mutant and every gremlins work directory is
# a new build, gigabytes that no later build reuses.
GREMLINS_VERSION     := v0.6.0
GREMLINS             := bin/tools/gremlins-$(GREMLINS_VERSION)/gremlins
MUTATE_PKGS          := ./rules ./server/realtime ./access ./collections/sqlite ./triggers
PKG                  ?= $(MUTATE_PKGS)
MUTATE_WORKERS       ?= 2
MUTATE_TIMEOUT_COEFF ?= 10
# More gremlins flags, e.g. MUTATE_FLAGS='-E query\.go' to leave a file out.
MUTATE_FLAGS         ?=

$(GREMLINS):
	GOBIN=$(CURDIR)/$(dir $(GREMLINS)) $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)

mutate: $(GREMLINS)
	@mkdir -p bin/mutate; fail=0; cache=$$(mktemp -d -t loom-mutate-gocache.XXXXXX) || exit 1; \
	trap 'rm -rf "$$cache"' EXIT; \
	for p in $(PKG); do \
		name=$$(echo "$${p#./}" | tr / _); \
		at="$$(date -u +%FT%TZ) $$(git rev-parse --short HEAD 2>/dev/null)$$(git diff --quiet HEAD 2>/dev/null || echo +dirty)"; \
		echo "== mutate $$p ($$at)"; \
		if GOFLAGS="$$GOFLAGS -count=1" GOCACHE=$$cache $(CURDIR)/$(GREMLINS) unleash $(CURDIR)/$${p#./} \
			--workers $(MUTATE_WORKERS) --timeout-coefficient $(MUTATE_TIMEOUT_COEFF) $(MUTATE_FLAGS) \
			--output $(CURDIR)/bin/mutate/$$name.json > bin/mutate/$$name.txt 2>&1; then \
			grep -E '^ *(LIVED|TIMED OUT|NOT VIABLE) ' bin/mutate/$$name.txt; \
			line="$$p $$(grep -E 'Killed:|Timed out:|Test efficacy|Mutator coverage' bin/mutate/$$name.txt | tr -s ' \n' ' ')"; \
		else \
			fail=1; tail -5 bin/mutate/$$name.txt; line="$$p FAILED: see bin/mutate/$$name.txt"; \
		fi; \
		echo "$$line"; echo "$$at $$line" >> bin/mutate/summary.txt; \
	done; exit $$fail

clean:
	rm -rf bin

# Regenerates the console screenshots in docs/console/ (the README shows
# them): the browser scenarios save one per page (t.shot) while they run.
# Needs Node and Chromium, as the browser tests do; make test never writes them.
.PHONY: screenshots
screenshots: console-deps
	LOOM_REQUIRE_BROWSER=1 LOOM_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run TestConsoleBrowser ./console/
