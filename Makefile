# trawl — make help lists the targets.
GO        ?= go
IMAGES    ?= ../shared/containers/build-images.sh
PKGS      ?= ./...
BENCHTIME ?= 1s
FUZZTIME  ?= 30s

# staticcheck, pinned: make tools installs this version where go install
# puts binaries ($(go env GOBIN), else the first $(go env GOPATH)/bin), and
# make vet refuses another version. .ci/run installs the same version.
STATICCHECK_VERSION := v0.8.2
GOBIN_DIR   ?= $(or $(shell $(GO) env GOBIN),$(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin)
STATICCHECK ?= $(GOBIN_DIR)/staticcheck

.PHONY: help build test test-cluster unit bench bench-crawl bench-web soak demo lint vet tools images fuzz docs-check

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/trawl
	$(GO) build -buildvcs=auto -o bin/trawl ./cmd/trawl   # auto: stamp the commit where git is, even if GOFLAGS says -buildvcs=false

vet: ## gofmt check, go vet, staticcheck; every fuzz target listed in make fuzz
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for f in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]*' --include='*_test.go' . | sed 's/^func //' | sort -u); do \
	  grep -qF -- "-fuzz '^$$f\$$\$$'" $(firstword $(MAKEFILE_LIST)) || { echo "make fuzz does not run $$f: add a line for it"; exit 1; }; \
	done
	$(GO) vet $(PKGS)
	@v=$$($(STATICCHECK) -version 2>/dev/null) || { \
	  echo "no staticcheck at $(STATICCHECK): make tools installs it"; exit 1; }; \
	  case "$$v" in *"($(patsubst v%,%,$(STATICCHECK_VERSION)))"*) ;; \
	  *) echo "$(STATICCHECK) is $$v, want $(STATICCHECK_VERSION): make tools installs it"; exit 1;; esac
	$(STATICCHECK) $(PKGS)

tools: ## install the pinned staticcheck that make vet runs
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: vet ## alias of vet

# The integration tests need Docker and the broker images; where the image
# script exists (no registry reachable), it builds them and names them.
#
# go test starts packages in the order given (each once): the two slowest,
# whose tests drive trawl processes and mostly wait on them and on servers,
# go first rather than last. For the same reason three packages run at
# once rather than one per CPU, and those two run four tests at once
# (their TestMain sets -parallel).
SLOW_PKGS := ./internal/integration/crawl ./cmd/trawl
TESTFLAGS ?= -p 3
test: vet ## vet, then every test with the race detector (unit, conformance, fuzz seeds, end to end, integration)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	echo "env: $$env_line"; \
	env $$env_line $(GO) test -race -count=1 -timeout 25m $(TESTFLAGS) $(if $(filter ./...,$(PKGS)),$(SLOW_PKGS)) $(PKGS)

# Clusters of three servers per test (NATS JetStream R3, Redis Cluster with
# replicas, RabbitMQ with quorum queues): the conformance suites on them and
# crawls with a server stopped mid-crawl. Heavy, so not part of make test,
# where these tests skip, saying so (they need TRAWL_TEST_CLUSTER=1).
CLUSTER_PKGS ?= ./broker/nats ./broker/redis ./broker/rabbitmq ./dedup/redis ./frontier/redisfrontier ./internal/integration/crawl
test-cluster: ## broker clusters in Docker (3 servers each): conformance, and crawls with a server stopped (not in make test)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	echo "env: $$env_line"; \
	log=$$(mktemp /tmp/trawl-test-cluster.XXXXXX); \
	env $$env_line TRAWL_TEST_CLUSTER=1 $(GO) test -race -count=1 -timeout 30m -run 'Cluster' -v $(CLUSTER_PKGS) >$$log 2>&1; rc=$$?; \
	grep -E '^ *(--- |PASS|FAIL|ok|panic)|(cluster|partitions)_test.go' $$log; echo "full log: $$log"; exit $$rc

unit: ## every test that needs no server or Docker (go test -race -short), quickly
	$(GO) test -race -short $(PKGS)

bench: ## benchmarks: broker, filters, crawl vs fetch limit (figures for BENCHMARKS.md)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	env $$env_line $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 30m $(PKGS)

# Whole crawls of the real binary (internal/benchcrawl); not part of make test.
bench-crawl: build ## crawl/fetch-limit ratio per broker, broker CPU, idle cost, against issue 10's bars (about 8 minutes)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	env $$env_line $(GO) run ./internal/benchcrawl -trawl bin/trawl $(BENCHCRAWL_FLAGS)

# Crawls of a web-shaped site (internal/benchcrawl web): 1,000 hosts on
# 127.0.x.y, half over HTTPS, 100 ms latency, against a bare fetch loop
# under the same rules; not part of make test.
bench-web: build ## crawl/fetch-loop ratio at 1,000 hosts, real latency and HTTPS, per mode and 4 workers, 2 crawls each between loops, against issue 26's bars (15–20 minutes; BENCHWEB_FLAGS="-modes redis4 -repeat 1 -rss-hosts 0" for one mode)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	env $$env_line $(GO) run ./internal/benchcrawl web -trawl bin/trawl $(BENCHWEB_FLAGS)

soak: build ## crawl 100,000 pages with one worker (embedded default), RSS every second: flat after the warm-up? (about 4 minutes)
	$(GO) run ./internal/benchcrawl soak -trawl bin/trawl $(SOAK_FLAGS)

# Every fuzz target, one line each (make vet checks that none is missing);
# the patterns are anchored, since -fuzz must match exactly one target.
fuzz: ## run every fuzz target for FUZZTIME (30s) each
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalize$$' -fuzztime $(FUZZTIME) ./dedup/
	$(GO) test -run '^$$' -fuzz '^FuzzExtractLinks$$' -fuzztime $(FUZZTIME) ./internal/linkscan/
	$(GO) test -run '^$$' -fuzz '^FuzzExtractLinksDifferential$$' -fuzztime $(FUZZTIME) ./internal/linkscan/
	$(GO) test -run '^$$' -fuzz '^FuzzUnmarshalRequest$$' -fuzztime $(FUZZTIME) ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzIsHTML$$' -fuzztime $(FUZZTIME) ./engine/

# Every sh block of docs/*.md is marked <!-- check --> (run), <!-- check
# needs=redis --> (run with a server in Docker) or <!-- skip: REASON -->.
docs-check: ## run the shell commands of docs/*.md against a local test site (servers in Docker)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	env $$env_line bash docs/check.sh

demo: build ## serve the test site and crawl it (no server needed)
	@set -e; rm -f demo.jsonl /tmp/trawl-demo-url; \
	  bin/trawl testsite --pages 500 > /tmp/trawl-demo-url & pid=$$!; \
	  trap "kill $$pid" EXIT; \
	  for i in $$(seq 50); do [ -s /tmp/trawl-demo-url ] && break; sleep 0.1; done; \
	  url=$$(cat /tmp/trawl-demo-url); \
	  bin/trawl crawl --name demo --flush --out demo.jsonl --idle-timeout 2s "$$url"; \
	  echo "pages written: $$(wc -l < demo.jsonl) (demo.jsonl)"; \
	  if command -v curl >/dev/null; then echo "the site says: $$(curl -s "$${url}_testsite/verify")"; fi
