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

PORT=$(( 20000 + RANDOM % 20000 ))
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

scaled() { awk -v n="$1" -v s="$SCALE" 'BEGIN { v = int(n * s); print (v < 200 ? 200 : v) }'; }

# rls CLIENTS N -> "calls_per_s p99_ms"
rls() {
  local c=$1 n=$2
  rm -f "$TMP/h2.log"
  local out
  out=$(h2load -n "$n" -c "$c" -m 1 -t 1 "${HDR[@]}" -d "$TMP/req" --log-file "$TMP/h2.log" "$URL")
  if ! grep -q "status codes: $n 2xx" <<<"$out"; then
    echo "rls bench: not every call succeeded:" >&2; echo "$out" >&2; exit 1
  fi
  local rps p99
  rps=$(awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) print $(i-1) }' <<<"$out")
  p99=$(awk '{ print $3 }' "$TMP/h2.log" | sort -n |
    awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%.3f", v[i] / 1000 }')
  echo "$rps $p99"
}
# resp CLIENTS N -> "ops_per_s p99_ms"
resp() {
  redis-benchmark -s "$TMP/s.sock" -c "$1" -n "$2" --csv CL.THROTTLE 'bench|user_u1' \
    1000000 1000000 1 1 2>/dev/null |
    awk -F'","' 'NR==2 { gsub(/"/, "", $2); gsub(/"/, "", $7); print $2, $7 }'
}
median() { sort -n -k"$1","$1" | sed -n 2p; }

for clients in 50 1; do
  n=$(scaled $(( clients == 1 ? 20000 : 200000 )))
  rr=(); pr=()
  for _ in 1 2 3; do
    rr+=("$(rls "$clients" "$n")")
    pr+=("$(resp "$clients" "$n")")
  done
  r_rps=$(printf '%s\n' "${rr[@]}" | median 1 | awk '{ print $1 }')
  r_p99=$(printf '%s\n' "${rr[@]}" | median 2 | awk '{ print $2 }')
  p_rps=$(printf '%s\n' "${pr[@]}" | median 1 | awk '{ print $1 }')
  p_p99=$(printf '%s\n' "${pr[@]}" | median 2 | awk '{ print $2 }')
  echo "clients=$clients requests=$n"
  printf '  rls_calls_per_s %10.0f   rls_p99_ms  %7.3f\n' "$r_rps" "$r_p99"
  printf '  resp_ops_per_s  %10.0f   resp_p99_ms %7.3f\n' "$p_rps" "$p_p99"
  awk -v a="$r_p99" -v b="$p_p99" -v x="$r_rps" -v y="$p_rps" \
    'BEGIN { printf "  ratio rls/resp: calls %.2f, p99 %.2f\n", x / y, (b > 0 ? a / b : 0) }'
done
