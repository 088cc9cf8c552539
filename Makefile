# etcd-agent. `make demo` runs the lab demo, `make test` runs every test.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/etcd-agent/etcd-agent/internal/version.Version=$(VERSION)
LAB_DIR ?= $(CURDIR)/lab
E2E_TIMEOUT ?= 45m

.PHONY: all tools build unit e2e test demo demo-down bench vet fmt clean

all: build

## tools: build etcd, etcdctl, etcdutl, kube-apiserver, promtool into bin/ (once per machine)
tools:
	@hack/tools/build.sh

## build: the etcd-agent binary into bin/
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/etcd-agent ./cmd/etcd-agent

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l cmd internal test 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

## unit: tests that need no running lab (some start a real etcd from bin/)
unit: tools build
	@hack/gotest.sh -count=1 ./cmd/... ./internal/...

## e2e: scenarios against the real lab (etcd + kube-apiserver processes)
e2e: tools build
	@hack/gotest.sh -count=1 -timeout $(E2E_TIMEOUT) ./test/e2e/...

## test: everything CI runs
test: tools build vet
	@hack/gotest.sh -count=1 -timeout $(E2E_TIMEOUT) ./cmd/... ./internal/... ./test/...

## demo: the heal demo: lab with agents, API load, wipe node2, live timeline, summary
demo: tools build
	$(BIN)/etcd-agent lab demo --dir $(LAB_DIR) --log-level warn

demo-down:
	$(BIN)/etcd-agent lab down --dir $(LAB_DIR)

## bench: benchmarks (not part of make test)
bench: tools build
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

clean:
	rm -f $(BIN)/etcd-agent
