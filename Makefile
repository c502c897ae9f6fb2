# The interface of the project: read this file to know how to run, test,
# benchmark and regenerate. Every target works on a fresh Debian machine
# with Go 1.26.

GO        ?= go
TOOL      := $(GO) tool -modfile=tools/go.mod
BIN       := bin
SERVICES  := frontdoor catalogsvc policysvc rcnssvc identitysvc auditsvc
PKGS      := ./...
# the packages whose Go benchmarks make bench runs (the hot paths)
BENCH_PKGS := ./frontdoor/... ./catalogsvc/... ./policysvc/... ./rcnssvc/... ./auditsvc/... ./identitysvc/... ./services/...
# VERSION is the service.version of the binaries' traces and metrics.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS   := -X github.com/agtpsuite/agtp/services/kit.version=$(VERSION)

.PHONY: all build run test test-short lint generate generate-check bench fuzz redis-server chromium walkthrough-tools clean

all: build

## build: compile every service binary, the suite and the agtp CLI into bin/
build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./services/cmd/agtpsuite $(foreach s,$(SERVICES),./$(s)/cmd/$(s)) ./services/cmd/agtp ./services/cmd/agtpconsole

## run: start the whole suite in one process on embedded defaults
run:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/agtpsuite ./services/cmd/agtpsuite
	exec $(BIN)/agtpsuite

## test: unit, integration and e2e tests against a real redis-server (and
## headless Chromium for the console's browser test); then the JCS
## canonicaliser against the standard library's RFC 8785 form, which Go
## builds only with GOEXPERIMENT=jsonv2; then every Go benchmark of make
## bench once, so that one that no longer runs fails here rather than in
## the next make bench
test: redis-server chromium walkthrough-tools
	$(GO) build -o $(BIN)/ $(foreach s,$(SERVICES),./$(s)/cmd/$(s))
	AGTP_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout 20m $(PKGS)
	GOEXPERIMENT=jsonv2 $(GO) test -count=1 -run MatchesJSONText ./services/jcs/
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS)

## test-short: the tests without the race detector (quicker while editing)
test-short: redis-server chromium walkthrough-tools
	$(GO) build -o $(BIN)/ $(foreach s,$(SERVICES),./$(s)/cmd/$(s))
	AGTP_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m $(PKGS)

## redis-server: install Debian's redis-server when it is missing
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server (Debian package)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@redis-server --version

## walkthrough-tools: install curl and python3 when missing; the README's
## walkthrough uses them, and services/suite runs it as a test
walkthrough-tools:
	@missing=; for c in curl python3; do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing (Debian packages)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing >/dev/null; fi

## chromium: install Debian's chromium when it is missing (the operator
## console's browser test drives it headless)
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium (Debian package)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

## lint: gofmt, go vet, staticcheck, buf lint, go mod tidy -diff, and buf
## breaking against the newest released proto image in proto/releases, so
## that a change to the protos that would break a client built against the
## release is caught (the image is committed, so a clone without tags checks
## the same thing; make proto-release RELEASE=vX.Y.Z records a new one)
RELEASE_IMAGE ?= $(lastword $(sort $(wildcard proto/releases/v*.binpb)))
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.\(gw\.\)\?go$$')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(TOOL) staticcheck $(PKGS)
	$(TOOL) buf lint
	$(GO) mod tidy -diff
	@test -n "$(RELEASE_IMAGE)" || { echo "no released proto image in proto/releases"; exit 1; }
	$(TOOL) buf breaking --against '$(RELEASE_IMAGE)'

## proto-release: record the protos of release tag RELEASE (e.g. v0.2.0) as
## the image later changes are checked against
.PHONY: proto-release
proto-release:
	@test -n "$(RELEASE)" || { echo "usage: make proto-release RELEASE=vX.Y.Z"; exit 1; }
	$(TOOL) buf build '.git#tag=$(RELEASE)' -o proto/releases/$(RELEASE).binpb

## generate: regenerate the protobuf, gRPC and gateway code (offline, with buf)
generate:
	$(TOOL) buf generate

## generate-check: fail when the committed generated code differs from the protos
generate-check: generate
	@git diff --exit-code -- proto || { echo "generated code is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- proto)" || { git status --porcelain -- proto; echo "untracked generated files: run make generate and commit"; exit 1; }

## bench: Go benchmarks of the hot paths, then the suite load benchmark
## (e2e/cmd/agtpbench: every service as a process with a real redis-server,
## about 3 minutes; summary on stdout, results and the latency plot in
## docs/bench/; BENCH_FLAGS passes flags, e.g. BENCH_FLAGS="-only latency")
BENCH_FLAGS ?=
bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(BENCH_PKGS)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(foreach s,$(SERVICES),./$(s)/cmd/$(s)) ./e2e/cmd/agtpbench
	AGTP_BIN_DIR=$(CURDIR)/$(BIN) $(BIN)/agtpbench -out docs/bench $(BENCH_FLAGS)

## deploy-check: build every Kubernetes overlay with kustomize and validate the
## manifests offline: strict decoding into the API types, the API server's own
## validation code and the suite's rules (deploy/check, a separate module so
## the Kubernetes dependencies stay out of go.mod; see deploy/k8s/README.md);
## it also parses deploy/observability's alerting rules and dashboard queries
## with Prometheus's own parsers and checks their metrics are exported
.PHONY: deploy-check
deploy-check:
	@for o in deploy/k8s/overlays/*/; do \
		echo "kustomize build $$o"; \
		$(TOOL) kustomize build $$o >/dev/null || exit 1; \
	done
	cd deploy/check && $(GO) test -count=1 ./...

## fuzz: run every fuzz target for FUZZTIME each (seed corpora are committed and
## run by make test); tools/fuzz.sh fails on any input found, and tells that
## apart from the Go 1.26 fuzzing coordinator's deadline error at the end of
## FUZZTIME, which finds nothing
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) tools/fuzz.sh

clean:
	rm -rf $(BIN)
