# kaas: `make test` does all the set-up a fresh machine needs, then vets and tests.
GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: all build test vet gotest deps e2e bench run fmt image imagetest k8sbin deploytest cluster chaos-cluster chaos peer peertest

all: build

# build compiles everything and writes the broker binary to bin/kaas, stamped with the
# checkout's VCS revision (`kaas --version`).
build:
	$(GO) build ./...
	$(GO) build -buildvcs=auto -o bin/kaas ./cmd/kaas

run:
	$(GO) run ./cmd/kaas

fmt:
	gofmt -l -w $$(git ls-files '*.go')

# deps installs what the tests need and is missing (test-only packages; root installs
# Debian packages, anyone installs npm packages from the lockfile under e2e/).
deps:
	$(GO) mod download
	@if [ -x e2e/setup.sh ]; then e2e/setup.sh; fi

# vet, imagetest and deploytest vet with -race: vet needs its dependencies compiled, and
# with the same build flags as `go test -race` that compile is the tests' own (one compile
# of each dependency, not a plain one for vet and a race one for the tests; helm and
# client-go in deploy/test are minutes of CPU each way).
vet:
	$(GO) vet -race ./...

gotest:
	$(GO) test -race -timeout 25m ./...

# e2e runs the non-Go client suites when they are present.
e2e:
	@if [ -x e2e/run.sh ]; then e2e/run.sh; fi

# image builds the container image without a container engine (deploy/image, a module of
# its own): dist/oci (an OCI image layout) and dist/kaas-image.tar (`docker load -i`),
# tagged kaas:<version> and kaas:latest. The Dockerfile builds the same image.
image:
	cd deploy/image && $(GO) run . -src ../.. -out ../../dist

# imagetest builds the image in a temp dir, loads it back and runs the binary inside.
imagetest:
	cd deploy/image && $(GO) vet -race ./... && $(GO) test -race ./...

# k8sbin builds the Kubernetes control plane of the real-apiserver tests (e2e/kube,
# deploy/test) into $${KAAS_TOOLS_CACHE:-$$HOME/.cache/kaas-tools}/k8s-v1.37.2/ when missing
# (~15-20 min cold, seconds warm); KAAS_SKIP_K8S=1 skips that tier explicitly. Only this
# target builds them: a plain `go test ./...` without them skips those tests and says so.
k8sbin:
	@if [ "$$KAAS_SKIP_K8S" = 1 ]; then echo "KAAS_SKIP_K8S=1: not building the kubernetes test binaries"; else hack/k8sbin/build.sh; fi

# deploytest checks the Helm chart (lint --strict, render, strict decoding, assertions)
# and the Grafana dashboard, in deploy/test (a module of its own: helm stays out of go.mod).
deploytest:
	cd deploy/test && $(GO) vet -race ./... && $(GO) test -race ./...

# test runs the tiers in turn through hack/tiers.sh, which prints the seconds each took
# (and the total) at the end, also when one fails. It runs the Kubernetes tier for real:
# once k8sbin has run, KAAS_REQUIRE_K8S=1 makes a binary still missing fail the tests
# instead of skipping them (KAAS_SKIP_K8S=1 still skips the tier explicitly).
test:
	@MAKE='$(MAKE)' hack/tiers.sh deps vet k8sbin gotest imagetest deploytest e2e peertest

# chaos runs the long set of fault-injection seeds (chaos/run_test.go) against one
# in-process broker, 20 s of faults each, a few minutes in all; the short set runs in
# gotest. Replay one seed: go test ./chaos -run TestChaos -chaos.seed=N -v
# It then runs chaos-cluster (three processes).
chaos:
	$(GO) test -race -timeout 30m ./chaos -run 'TestChaos$$' -chaos.long -count=1 -v
	$(MAKE) chaos-cluster

# peer runs franz-go's own integration tests (TestGroupETL, TestTxnEtl and their KIP-848
# and static-member variants) against kaas and then kfake (e2e/peer.sh), timing each;
# peertest, a tier of test, runs them against kaas alone.
peer:
	e2e/peer.sh

peertest:
	PEER_BROKERS=kaas e2e/peer.sh

# bench runs every benchmark once and ends with one table of every figure kaas reports
# beside kfake's in the same run, as ratios (hack/benchtable).
bench:
	@bash -o pipefail -c '$(GO) test -run=NONE -bench=. -benchtime=1x -timeout 60m ./... | $(GO) run ./hack/benchtable'

# cluster runs three brokers on 127.0.0.1:9092-9094 on one data dir (static registry).
cluster: build
	e2e/cluster/run.sh

# chaos-cluster runs the three-process kill -9 / pause runs (e2e/cluster: consumer groups over
# their long seed set, and exactly-once transactions over 15 kills); their short forms run
# in gotest. Replay one: go test ./e2e/cluster -run TestClusterChaos -cluster.seed=N -v
chaos-cluster:
	$(GO) test -race -timeout 30m -count=1 -v ./e2e/cluster -run 'TestClusterChaos$$|TestClusterEOSKill$$' -cluster.long
