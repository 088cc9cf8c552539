# etcd-agent. `make demo` runs the lab demo, `make test` runs every test.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# -s -w: no symbol table or DWARF (stack traces keep their names and lines)
LDFLAGS := -s -w -X github.com/etcd-agent/etcd-agent/internal/version.Version=$(VERSION)
LAB_DIR ?= $(CURDIR)/lab
E2E_TIMEOUT ?= 45m
# e2e scenarios with a lab of their own run this many at a time (test/e2e newLab)
E2E_PARALLEL ?= 2
BENCH_MEMBERS ?= 1,10,30
# make test fuzzes every target this many inputs (make fuzz: FUZZTIME). A
# count, not a duration: go 1.26's fuzzing can fail a target at the end of a
# duration with a bare "context deadline exceeded" (go.dev/issue/75804).
TEST_FUZZTIME ?= 300x

.PHONY: all tools demo-tools build unit e2e e2e-full e2e-chaos test fuzz demo demo-down bench vet fmt clean deploy-test dashboard-png images

all: build

## tools: build etcd (3.6), etcd-3.7, etcd-3.5, etcdutl-3.5, etcdctl, etcdutl, kube-apiserver, kube-controller-manager, kube-scheduler, promtool, weed, the real node's binaries and gofail into bin/ (once per machine)
tools:
	@hack/tools/build.sh

## build: the etcd-agent binary (the product) and etcd-agent-lab (the lab:
## demo, benches, fault verbs; not shipped) into bin/
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/etcd-agent ./cmd/etcd-agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/etcd-agent-lab ./cmd/etcd-agent-lab

## images: the real lab node's images (etcd-agent, etcd, pause) as docker-save
## archives in bin/images, no registry, no Docker (hack/images, docs/plans/real-node.md section 2)
images: tools build
	cd hack/images && GO=$(GO) $(GO) run . -bin $(BIN) -out $(BIN)/images

vet:
	$(GO) vet ./...
	cd test/chaos && $(GO) vet ./...
	cd hack/render-dashboard && $(GO) vet ./...
	cd hack/images && $(GO) vet ./...
	@out=$$(gofmt -l cmd internal metrics test hack/render-dashboard hack/images 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

## unit: tests that need no running lab (some start a real etcd from bin/)
unit: tools build
	@hack/gotest.sh -count=1 ./cmd/... ./internal/...

## e2e: scenarios against the real lab (etcd + kube-apiserver processes)
e2e: tools build images
	@hack/gotest.sh -count=1 -parallel $(E2E_PARALLEL) -timeout $(E2E_TIMEOUT) ./test/e2e/...

## test: everything CI runs (and a short fuzz run: TEST_FUZZTIME per target). -p 1: one package at a time (the lab-based ones
## each run real etcd and kube-apiserver processes); inside test/e2e the
## scenarios with a lab of their own run E2E_PARALLEL at a time: they mostly
## wait (one lab keeps ~25% of the 2 cores busy), and the serial run took 39 min.
## The chaos smoke run plays seed 251 (a lost node, a full disk, a torn WAL,
## corrupt and wiped members with agents killed and the API stopped mid-heal)
## unless CHAOS_SEED says otherwise; make e2e-chaos draws a random one.
test: tools build images vet
	@hack/gotest.sh -p 1 -parallel $(E2E_PARALLEL) -count=1 -timeout $(E2E_TIMEOUT) ./cmd/... ./internal/... ./metrics/... ./test/...
	@cd test/chaos && CHAOS_SEED=$${CHAOS_SEED:-251} ../../hack/gotest.sh -p 1 -count=1 -timeout $(E2E_TIMEOUT) ./...
	cd hack/render-dashboard && $(GO) test -count=1 ./...
	cd hack/images && $(GO) test -count=1 ./...
	@FUZZTIME=$(TEST_FUZZTIME) FUZZ_MINIMIZE_TIME=100x GO=$(GO) hack/fuzz.sh

## fuzz: every native Go fuzz target (func FuzzXxx: the parsers of what
## others write), FUZZTIME each, one after the other; a table of targets,
## executions and execs/sec; a crash fails (hack/fuzz.sh). Plain go test
## already replays each target's seed corpus.
FUZZTIME ?= 60s
fuzz:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) hack/fuzz.sh

## e2e-full: the long scenarios kept out of make test (10 seed-mode heals in a row)
e2e-full: tools build
	@hack/gotest.sh -tags e2efull -count=1 -timeout 60m -run 'TestSeedModeTenHealsInARow' ./test/e2e/...

## e2e-chaos: the randomized fault soak (docs/testing.md), kept out of make test
## (which runs one 3-minute smoke run). CHAOS_SEED=n replays a seed; CHAOS_RUNS
## seeds in a row; CHAOS_MODE=majority; reports and table.md in CHAOS_REPORT.
CHAOS_DURATION ?= 10m
CHAOS_RUNS ?= 1
CHAOS_MODE ?= minority
CHAOS_REPORT ?= $(CURDIR)/.chaos
e2e-chaos: tools build
	@cd test/chaos && CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_RUNS=$(CHAOS_RUNS) CHAOS_MODE=$(CHAOS_MODE) CHAOS_REPORT=$(CHAOS_REPORT) \
		../../hack/gotest.sh -count=1 -timeout 24h -run '^TestChaos$$' .

## deploy-test: the manifests (server-side dry-run), RBAC and alert rules (promtool)
deploy-test: tools build
	@hack/gotest.sh -count=1 ./test/deploy/...

## dashboard-png: re-render docs/dashboard.png from the recorded lab run
dashboard-png:
	cd hack/render-dashboard && $(GO) run . render -in testdata/lab-run.jsonl.gz -out ../../docs/dashboard.png

## demo: the heal demo: lab with agents, API load, wipe node2, live timeline, summary
## (a previous demo's lab in LAB_DIR is stopped and its files replaced: a lab
## reuses no node's data, whose cluster had other ports and another token)
## demo-tools: only what the demo runs (etcd, etcdctl, kube-apiserver), not the
## test tools (issue 42: a newcomer's cold `make demo` built all of them)
demo-tools:
	@hack/tools/build.sh etcd etcdctl kube-apiserver

demo: demo-tools build
	@if [ -f $(LAB_DIR)/lab.json ]; then $(BIN)/etcd-agent-lab down --dir $(LAB_DIR) && rm -rf $(LAB_DIR); fi
	$(BIN)/etcd-agent-lab demo --dir $(LAB_DIR) --log-level warn

demo-down:
	$(BIN)/etcd-agent-lab down --dir $(LAB_DIR)

## bench: micro-benchmarks, then the heal vs. bare etcd rejoin table (not part of make test)
BENCH_SIZES ?= 100MB,500MB
bench: tools build
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...
	$(BIN)/etcd-agent-lab bench --dir $(CURDIR)/.lab-bench --sizes $(BENCH_SIZES) --log-level warn
	$(BIN)/etcd-agent-lab bench --move --dir $(CURDIR)/.lab-bench --sizes $(BENCH_SIZES) --log-level warn
	$(BIN)/etcd-agent-lab bench-scale --dir $(CURDIR)/.lab-bench --members $(BENCH_MEMBERS) --replicas 1 --log-level warn
	$(BIN)/etcd-agent-lab bench-scale --dir $(CURDIR)/.lab-bench --members $(BENCH_MEMBERS) --replicas 3 --log-level warn

clean:
	rm -f $(BIN)/etcd-agent $(BIN)/etcd-agent-lab
