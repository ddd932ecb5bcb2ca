#!/usr/bin/env bash
# docs/check.sh (make docs-check) runs the shell commands of docs/*.md.
#
# Convention: every ```sh block in docs/*.md is preceded by one of
#   <!-- check -->                 run it
#   <!-- check needs=redis -->     run it with a Redis server (also nats, rabbitmq;
#                                  comma-separated), started here in Docker
#   <!-- check dir=repo -->        run it in the repository's root (go commands)
#   <!-- skip: REASON -->          do not run it, for the stated reason
# An unmarked sh block is an error. The blocks of one file run in order, in one
# fresh folder, each with bash -euo pipefail and a time limit, and must exit 0.
#
# The environment of every block: bin/trawl first on PATH (built here), SITE
# the URL of a `trawl testsite` served on loopback, TRAWL_ALLOW_PRIVATE=true
# (the test site is on loopback) and TRAWL_IDLE_TIMEOUT=1s (crawls end soon).
# A needed server's URL is in TRAWL_REDIS_URL, TRAWL_NATS_URL or
# TRAWL_AMQP_URL; images come from TRAWL_REDIS_IMAGE, TRAWL_NATS_IMAGE and
# TRAWL_RABBITMQ_IMAGE (default redis:7, nats:2, rabbitmq:3). Without Docker,
# the blocks that need a server are skipped, saying so.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BLOCK_TIMEOUT=${BLOCK_TIMEOUT:-90}

say() { printf 'docs-check: %s\n' "$*" >&2; }

work=$(mktemp -d)
site_pid=""
containers=()
cleanup() {
	[ -n "$site_pid" ] && kill "$site_pid" 2>/dev/null
	for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
	rm -rf "$work"
}
trap cleanup EXIT

go build -o bin/trawl ./cmd/trawl
export PATH="$root/bin:$PATH"

bin/trawl testsite --pages 200 >"$work/site.url" 2>"$work/site.err" &
site_pid=$!
for _ in $(seq 100); do [ -s "$work/site.url" ] && break; sleep 0.1; done
[ -s "$work/site.url" ] || { say "trawl testsite did not start:"; cat "$work/site.err" >&2; exit 1; }
SITE=$(head -1 "$work/site.url")
export SITE TRAWL_ALLOW_PRIVATE=true TRAWL_IDLE_TIMEOUT=1s

have_docker=false
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then have_docker=true; fi

# wait_for NAME CMD...: poll CMD for up to 60s, saying what it waits for.
wait_for() {
	local name=$1; shift
	say "waiting for $name to accept connections (up to 60s)"
	for _ in $(seq 120); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	say "$name did not start"; return 1
}

# port CONTAINER PORT: the host port Docker mapped.
port() { docker port "$1" "$2/tcp" | head -1 | sed 's/.*://'; }

declare -A started=()
start() {
	local what=$1 c="trawl-docs-check-$1-$$"
	[ -n "${started[$what]:-}" ] && return 0
	case $what in
	redis)
		docker run -d --rm --name "$c" -p 127.0.0.1::6379 "${TRAWL_REDIS_IMAGE:-redis:7}" >/dev/null
		containers+=("$c")
		export TRAWL_REDIS_URL="redis://127.0.0.1:$(port "$c" 6379)/0"
		# A crawl that does not exist: trawl stats exits 1 saying so once it
		# reached the server.
		wait_for redis bash -c "bin/trawl stats --broker=redis --name docs-check-probe 2>&1 | grep -q 'no crawl docs-check-probe'"
		;;
	nats)
		docker run -d --rm --name "$c" -p 127.0.0.1::4222 "${TRAWL_NATS_IMAGE:-nats:2}" -js -sd /data >/dev/null
		containers+=("$c")
		export TRAWL_NATS_URL="nats://127.0.0.1:$(port "$c" 4222)"
		# Docker's port proxy accepts connections before the server does.
		wait_for nats bash -c "docker logs $c 2>&1 | grep -q 'Server is ready'"
		;;
	rabbitmq)
		docker run -d --rm --name "$c" -p 127.0.0.1::5672 "${TRAWL_RABBITMQ_IMAGE:-rabbitmq:3}" >/dev/null
		containers+=("$c")
		export TRAWL_AMQP_URL="amqp://guest:guest@127.0.0.1:$(port "$c" 5672)/"
		wait_for rabbitmq docker exec "$c" rabbitmq-diagnostics -q check_port_connectivity
		;;
	*) say "unknown server $what"; return 1 ;;
	esac
	started[$what]=1
}

# extract FILE: print "LINE<TAB>MARKER" for each sh block, its body in
# $work/blocks/FILE.LINE; fail on an unmarked sh block.
extract() {
	awk -v dir="$work/blocks" -v base="$(basename "$1")" '
		/^<!-- (check( needs=[a-z,]+)?( dir=repo)?|skip: .+) -->$/ { marker = $0; mline = NR; next }
		/^```sh[[:space:]]*$/ && !inblock {
			if (marker == "" || mline != NR - 1) { printf "%s:%d: sh block without <!-- check --> or <!-- skip: REASON --> on the line before\n", FILENAME, NR > "/dev/stderr"; bad = 1 }
			inblock = 1; start = NR; out = dir "/" base "." NR; printf "" > out
			print NR "\t" marker
			marker = ""; next
		}
		/^```/ && inblock { inblock = 0; close(out); next }
		inblock { print > out }
		/^```/ { fence = !fence }
		{ if ($0 !~ /^<!--/) marker = "" }
		END { exit bad }
	' "$1"
}

mkdir -p "$work/blocks"
ran=0 skipped=0 failed=0
for f in docs/*.md; do
	list=$(extract "$f") || { failed=$((failed + 1)); continue; }
	[ -z "$list" ] && continue
	dir="$work/run/$(basename "$f" .md)"
	mkdir -p "$dir"
	while IFS=$'\t' read -r line marker; do
		body="$work/blocks/$(basename "$f").$line"
		case $marker in
		"<!-- skip: "*)
			reason=${marker#<!-- skip: }; reason=${reason% -->}
			say "$f:$line: skipped: $reason"; skipped=$((skipped + 1)); continue ;;
		esac
		needs=""
		[[ $marker =~ needs=([a-z,]+) ]] && needs=${BASH_REMATCH[1]}
		if [ -n "$needs" ] && ! $have_docker; then
			say "$f:$line: skipped: needs $needs and Docker is not running"; skipped=$((skipped + 1)); continue
		fi
		for s in ${needs//,/ }; do start "$s"; done
		say "$f:$line: running"
		rundir=$dir
		[[ $marker == *"dir=repo"* ]] && rundir=$root
		if ! (cd "$rundir" && timeout "$BLOCK_TIMEOUT" bash -euo pipefail "$body") >"$work/out" 2>&1; then
			say "$f:$line: FAILED; the block:"; cat "$body" >&2
			say "its output:"; tail -40 "$work/out" >&2
			failed=$((failed + 1))
		else
			ran=$((ran + 1))
		fi
	done <<<"$list"
done
say "$ran blocks ran, $skipped skipped, $failed failed"
[ "$failed" -eq 0 ]
