#!/usr/bin/env bash
# The HTTP decision endpoint (GET /v1/throttle over HTTP/1.1 keep-alive) vs
# the RESP path (CL.THROTTLE over the Unix socket), side by side in one run,
# on one sluiced and the same key.
#
#   tests/bench/http.sh [BUILD_DIR]      (default build; BENCH_SCALE=X scales N)
#
# HTTP: h2load --h1 (Debian nghttp2-client) GETs
# /v1/throttle?key=u1&burst=1000000&count=1000000&period=1 (CL.THROTTLE's
# form, a limit that allows every call, so every call is decided and
# answered 200); p99 comes from h2load's per-request log.
# RESP: redis-benchmark CL.THROTTLE u1 1000000 1000000 1 1 (the same key).
# Both with 50 clients (one request in flight each) and with 1.  Each figure
# is the median of 3 rounds run in turn.  Prints
#   http_decisions_per_s, http_p99_ms, resp_ops_per_s, resp_p99_ms, ratios
# This is a benchmark, not a test: it prints figures and exits 0.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
build=${1:-$ROOT/build}
SCALE=${BENCH_SCALE:-1}
for tool in h2load curl redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "http bench: $tool not found (bash deploy/install-deps.sh)" >&2; exit 1; }
done
[ -x "$build/bin/sluiced" ] || { echo "http bench: $build/bin/sluiced not built" >&2; exit 1; }

TMP=$(mktemp -d /tmp/sluice-http-bench.XXXXXX)
SPID=""
cleanup() {
  [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

PORT=$(bench_free_ports tcp 1)
"$build/bin/sluiced" --socket "$TMP/s.sock" --http "127.0.0.1:$PORT" --log-level warn &
SPID=$!
for _ in $(seq 1 200); do
  redis-cli -s "$TMP/s.sock" PING >/dev/null 2>&1 && break
  sleep 0.05
done
URL="http://127.0.0.1:$PORT/v1/throttle?key=u1&burst=1000000&count=1000000&period=1"

# One call answered 200 "allowed", or the figures mean nothing.
[ "$(curl -s "$URL")" = "allowed" ] || { echo "http bench: /v1/throttle did not allow" >&2; exit 1; }

h2load --h1 -n 2000 -c 50 -m 1 -t 1 "$URL" >/dev/null
redis-benchmark -s "$TMP/s.sock" -c 50 -n 2000 -q CL.THROTTLE u1 1000000 1000000 1 1 >/dev/null

# http CLIENTS N -> "calls_per_s p99_ms"
http() {
  local c=$1 n=$2
  rm -f "$TMP/h1.log"
  local out
  out=$(h2load --h1 -n "$n" -c "$c" -m 1 -t 1 --log-file "$TMP/h1.log" "$URL")
  if ! grep -q "status codes: $n 2xx" <<<"$out"; then
    echo "http bench: not every call was allowed:" >&2; echo "$out" >&2; exit 1
  fi
  bench_h2load_figures "$out" "$TMP/h1.log"
}
# resp CLIENTS N -> "ops_per_s p99_ms"
resp() { bench_resp "$TMP/s.sock" "$1" "$2" CL.THROTTLE u1 1000000 1000000 1 1; }

bench_side_by_side http decisions http resp ops resp
