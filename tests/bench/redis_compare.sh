#!/usr/bin/env bash
# sluice vs Redis 7 + Lua GCRA, side by side in one run, same client.
#
#   tests/bench/redis_compare.sh            (SLUICE_BIN=build/bin by default)
#
# Starts sluiced and redis-server (no persistence) on Unix sockets in a temp
# dir, loads tests/bench/gcra.lua once (SCRIPT LOAD) and drives both with
# redis-benchmark over the sockets, random keys from a 100k space:
#   1. 50 clients, no pipelining:   CL.THROTTLE vs EVALSHA vs Redis PING
#   2. 50 clients, pipeline 16:     same three
#   3. 1 client, no pipelining:     p99 latency of the same three
# and prints ops/s, the ratios sluice/Lua and sluice/PING, and p99s.
# BENCH_SCALE=X multiplies every request count (default 2: about 40 s on 2
# cores; a fraction such as 0.02 gives the few-second smoke run CI uses).
# Each figure is the median of 3 rounds run in turn with its two comparisons.
# This is a benchmark, not a test: it prints figures and exits 0.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
SLUICE_BIN=${SLUICE_BIN:-$ROOT/build/bin}
SCALE=${BENCH_SCALE:-2}
for tool in redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "redis_compare: $tool not found (apt-get install redis)" >&2; exit 1; }
done
[ -x "$SLUICE_BIN/sluiced" ] || { echo "redis_compare: $SLUICE_BIN/sluiced not built" >&2; exit 1; }

TMP=$(mktemp -d /tmp/sluice-bench.XXXXXX)
SPID=""; RPID=""
cleanup() {
  [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null || true
  [ -n "$RPID" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

"$SLUICE_BIN/sluiced" --socket "$TMP/sluice.sock" --log-level warn &
SPID=$!
redis-server --port 0 --unixsocket "$TMP/redis.sock" --save '' --appendonly no \
  --daemonize no --loglevel warning >"$TMP/redis.log" 2>&1 &
RPID=$!
bench_wait_sock "$TMP/sluice.sock"
bench_wait_sock "$TMP/redis.sock"
SHA=$(redis-cli -s "$TMP/redis.sock" SCRIPT LOAD "$(cat "$HERE/gcra.lua")")

# run SOCKET CLIENTS PIPELINE N ARGS... -> prints "rps p99_ms"
run() {
  local sock=$1 clients=$2 pipe=$3 n=$4; shift 4
  redis-benchmark -s "$sock" -c "$clients" -P "$pipe" -n "$n" -r 100000 --csv "$@" 2>/dev/null |
    awk -F'","' 'NR==2 { gsub(/"/, "", $2); gsub(/"/, "", $7); print $2, $7 }'
}

THR=(CL.THROTTLE 'key:__rand_int__' 15 30 60 1)
LUA=(EVALSHA "$SHA" 1 'key:__rand_int__' 15 30 60 1)

declare -A R
ROUNDS=()
# Each group runs its three benchmarks in turn, three rounds, so that load
# from anything else on the machine hits all three alike; each keeps its
# median round (by ops/s for throughput, by p99 for latency).
round() { # label sock clients pipe n args...
  local label=$1; shift
  ROUNDS+=("$label $(run "$@")")
}
keep_median() { # label key(2=rps,3=p99)
  local label=$1 key=$2
  R[$label]=$(printf '%s\n' "${ROUNDS[@]}" | awk -v l="$label" '$1 == l { print $2, $3 }' |
    sort -n -k$((key - 1)),$((key - 1)) | sed -n 2p)
  printf '  %-12s %12.0f ops/s   p99 %7.3f ms\n' "$label" ${R[$label]}
}
scaled() { # requests: n * SCALE, at least 200
  awk -v n="$1" -v s="$SCALE" 'BEGIN { v = int(n * s); print (v < 200 ? 200 : v) }'
}
group() { # key n_sluice n_lua n_ping clients pipe
  local key=$1 ns=$2 nl=$3 np=$4 c=$5 p=$6 sfx=$7
  ROUNDS=()
  for _ in 1 2 3; do
    round "sluice_$sfx" "$TMP/sluice.sock" "$c" "$p" "$ns" "${THR[@]}"
    round "lua_$sfx" "$TMP/redis.sock" "$c" "$p" "$nl" "${LUA[@]}"
    round "ping_$sfx" "$TMP/redis.sock" "$c" "$p" "$np" PING
  done
  keep_median "sluice_$sfx" "$key"
  keep_median "lua_$sfx" "$key"
  keep_median "ping_$sfx" "$key"
}

echo "sluice vs Redis $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p') + Lua GCRA (redis-benchmark over Unix sockets, 100k random keys;"
echo "3 interleaved rounds per figure, median kept)"
echo "50 clients, no pipelining:"
group 2 $(scaled 100000) $(scaled 50000) $(scaled 100000) 50 1 c50
echo "50 clients, pipeline 16:"
group 2 $(scaled 700000) $(scaled 100000) $(scaled 700000) 50 16 p16
echo "1 client, no pipelining (latency):"
group 3 $(scaled 20000) $(scaled 15000) $(scaled 20000) 1 1 c1

rps() { echo "${R[$1]}" | cut -d' ' -f1; }
p99() { echo "${R[$1]}" | cut -d' ' -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
echo "ratios:"
echo "  no pipelining:  sluice/Lua $(ratio "$(rps sluice_c50)" "$(rps lua_c50)")x   sluice/PING $(ratio "$(rps sluice_c50)" "$(rps ping_c50)")x   (targets >=1.5x Lua or >=0.95x PING)"
echo "  pipeline 16:    sluice/Lua $(ratio "$(rps sluice_p16)" "$(rps lua_p16)")x   sluice/PING $(ratio "$(rps sluice_p16)" "$(rps ping_p16)")x   (target >=7x Lua)"
echo "  1 client p99:   sluice $(p99 sluice_c1) ms   Lua $(p99 lua_c1) ms   PING $(p99 ping_c1) ms   (target sluice < PING)"
