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

PORT=$(( 20000 + RANDOM % 20000 ))
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

scaled() { awk -v n="$1" -v s="$SCALE" 'BEGIN { v = int(n * s); print (v < 200 ? 200 : v) }'; }

# http CLIENTS N -> "calls_per_s p99_ms"
http() {
  local c=$1 n=$2
  rm -f "$TMP/h1.log"
  local out
  out=$(h2load --h1 -n "$n" -c "$c" -m 1 -t 1 --log-file "$TMP/h1.log" "$URL")
  if ! grep -q "status codes: $n 2xx" <<<"$out"; then
    echo "http bench: not every call was allowed:" >&2; echo "$out" >&2; exit 1
  fi
  local rps p99
  rps=$(awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) print $(i-1) }' <<<"$out")
  p99=$(awk '{ print $3 }' "$TMP/h1.log" | sort -n |
    awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%.3f", v[i] / 1000 }')
  echo "$rps $p99"
}
# resp CLIENTS N -> "ops_per_s p99_ms"
resp() {
  redis-benchmark -s "$TMP/s.sock" -c "$1" -n "$2" --csv CL.THROTTLE u1 1000000 1000000 1 1 \
    2>/dev/null | awk -F'","' 'NR==2 { gsub(/"/, "", $2); gsub(/"/, "", $7); print $2, $7 }'
}
median() { sort -n -k"$1","$1" | sed -n 2p; }

for clients in 50 1; do
  n=$(scaled $(( clients == 1 ? 20000 : 200000 )))
  hr=(); pr=()
  for _ in 1 2 3; do
    hr+=("$(http "$clients" "$n")")
    pr+=("$(resp "$clients" "$n")")
  done
  h_rps=$(printf '%s\n' "${hr[@]}" | median 1 | awk '{ print $1 }')
  h_p99=$(printf '%s\n' "${hr[@]}" | median 2 | awk '{ print $2 }')
  p_rps=$(printf '%s\n' "${pr[@]}" | median 1 | awk '{ print $1 }')
  p_p99=$(printf '%s\n' "${pr[@]}" | median 2 | awk '{ print $2 }')
  echo "clients=$clients requests=$n"
  printf '  http_decisions_per_s %10.0f   http_p99_ms %7.3f\n' "$h_rps" "$h_p99"
  printf '  resp_ops_per_s       %10.0f   resp_p99_ms %7.3f\n' "$p_rps" "$p_p99"
  awk -v a="$h_p99" -v b="$p_p99" -v x="$h_rps" -v y="$p_rps" \
    'BEGIN { printf "  ratio http/resp: calls %.2f, p99 %.2f\n", x / y, (b > 0 ? a / b : 0) }'
done
