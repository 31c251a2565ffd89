#!/usr/bin/env bash
# Envoy's rate limit service (gRPC ShouldRateLimit over h2c) vs the RESP
# path (CL.THROTTLE over the Unix socket), side by side in one run, on one
# sluiced and the same key.
#
#   tests/bench/rls.sh [BUILD_DIR]       (default build; BENCH_SCALE=X scales N)
#
# RLS: h2load (Debian nghttp2-client) posts one framed RateLimitRequest
# (domain bench, descriptor user=u1; the limit is 4e9 per second so every
# call is decided and allowed); p99 comes from h2load's per-request log.
# RESP: redis-benchmark CL.THROTTLE 'bench|user_u1' 1000000 1000000 1 1
# (the key the descriptor maps to, a limit that allows every call).  Both with 50 clients (one request in flight each) and with 1.
# Each figure is the median of 3 rounds run in turn.  Prints
#   rls_calls_per_s, rls_p99_ms, resp_ops_per_s, resp_p99_ms, p99 ratio
# This is a benchmark, not a test: it prints figures and exits 0.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
build=${1:-$ROOT/build}
SCALE=${BENCH_SCALE:-1}
for tool in h2load nghttp redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "rls bench: $tool not found (bash deploy/install-deps.sh)" >&2; exit 1; }
done
[ -x "$build/bin/sluiced" ] || { echo "rls bench: $build/bin/sluiced not built" >&2; exit 1; }

TMP=$(mktemp -d /tmp/sluice-rls-bench.XXXXXX)
SPID=""
cleanup() {
  [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

mkdir "$TMP/rl"
cat >"$TMP/rl/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
YAML
# RateLimitRequest{domain: "bench", descriptors: [{entries: [{key: "user",
# value: "u1"}]}]} behind gRPC's 5-byte prefix (21 bytes of protobuf).
printf '\x00\x00\x00\x00\x15\x0a\x05bench\x12\x0c\x0a\x0a\x0a\x04user\x12\x02u1' >"$TMP/req"

PORT=$(bench_free_ports tcp 1)
"$build/bin/sluiced" --socket "$TMP/s.sock" --grpc "127.0.0.1:$PORT" \
  --ratelimit-config "$TMP/rl" --log-level warn &
SPID=$!
for _ in $(seq 1 200); do
  redis-cli -s "$TMP/s.sock" PING >/dev/null 2>&1 && break
  sleep 0.05
done
URL="http://127.0.0.1:$PORT/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HDR=(-H 'content-type: application/grpc' -H 'te: trailers')

# One call answered with grpc-status 0 and a body, or the figures mean nothing.
if ! nghttp -v "${HDR[@]}" -d "$TMP/req" "$URL" 2>&1 | grep -q 'grpc-status: 0'; then
  echo "rls bench: ShouldRateLimit did not answer grpc-status 0" >&2; exit 1
fi

# Warm up both paths (first connections, the key's state) before measuring.
h2load -n 2000 -c 50 -m 1 -t 1 "${HDR[@]}" -d "$TMP/req" "$URL" >/dev/null
redis-benchmark -s "$TMP/s.sock" -c 50 -n 2000 -q CL.THROTTLE 'bench|user_u1' 1000000 1000000 1 1 \
  >/dev/null

# rls CLIENTS N -> "calls_per_s p99_ms"
rls() {
  local c=$1 n=$2
  rm -f "$TMP/h2.log"
  local out
  out=$(h2load -n "$n" -c "$c" -m 1 -t 1 "${HDR[@]}" -d "$TMP/req" --log-file "$TMP/h2.log" "$URL")
  if ! grep -q "status codes: $n 2xx" <<<"$out"; then
    echo "rls bench: not every call succeeded:" >&2; echo "$out" >&2; exit 1
  fi
  bench_h2load_figures "$out" "$TMP/h2.log"
}
# resp CLIENTS N -> "ops_per_s p99_ms"
resp() { bench_resp "$TMP/s.sock" "$1" "$2" CL.THROTTLE 'bench|user_u1' 1000000 1000000 1 1; }

bench_side_by_side rls calls rls resp ops resp
