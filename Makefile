# trawl — make help lists the targets.
GO        ?= go
IMAGES    ?= ../shared/containers/build-images.sh
PKGS      ?= ./...
BENCHTIME ?= 1s

.PHONY: help build test unit bench demo lint vet images fuzz

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

build: ## build bin/trawl
	$(GO) build -o bin/trawl ./cmd/trawl

vet: ## gofmt check and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

lint: vet ## alias of vet

# The integration tests need Docker and the broker images; where the image
# script exists (no registry reachable), it builds them and names them.
test: vet ## vet, then every test with the race detector (unit, conformance, fuzz seeds, end to end, integration)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	echo "env: $$env_line"; \
	env $$env_line $(GO) test -race -count=1 -timeout 25m $(PKGS)

unit: ## the tests that need no server, quickly
	$(GO) test -race -count=1 -short . ./broker/ ./broker/memory/ ./dedup/ ./dedup/local/ ./engine/ ./internal/... ./cmd/...

bench: ## benchmarks: broker, filters, crawl vs fetch limit (figures for BENCHMARKS.md)
	@env_line=""; \
	if [ -z "$$TRAWL_REDIS_IMAGE" ] && [ -f "$(IMAGES)" ]; then env_line=$$(bash $(IMAGES)); fi; \
	env $$env_line $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 30m $(PKGS)

fuzz: ## run each fuzz target for 30s
	$(GO) test -run '^$$' -fuzz FuzzCanonicalize -fuzztime 30s ./dedup/
	$(GO) test -run '^$$' -fuzz FuzzExtractLinks -fuzztime 30s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzUnmarshalRequest -fuzztime 30s ./engine/

demo: build ## serve the test site and crawl it (no server needed)
	@set -e; rm -f demo.jsonl /tmp/trawl-demo-url; \
	  bin/trawl testsite --pages 500 > /tmp/trawl-demo-url & pid=$$!; \
	  trap "kill $$pid" EXIT; \
	  for i in $$(seq 50); do [ -s /tmp/trawl-demo-url ] && break; sleep 0.1; done; \
	  url=$$(cat /tmp/trawl-demo-url); \
	  bin/trawl crawl --flush --out demo.jsonl --idle-timeout 2s "$$url"; \
	  echo "pages written: $$(wc -l < demo.jsonl) (demo.jsonl)"; \
	  if command -v curl >/dev/null; then echo "the site says: $$(curl -s "$${url}_testsite/verify")"; fi
