#!/usr/bin/env bash
# A clustered node beside a standalone one, in one run: node 1 of a 3-node
# cluster on 127.0.0.1 (owning about a third of the keys, so the owner's
# work is included) and a standalone sluiced, both driven by redis-benchmark
# over their Unix sockets with CL.THROTTLE on random keys from 1k, 100k and
# 1M key spaces, unpipelined and at -P 16, in turn.  Prints ops/s, p99 and
# the worst latency of each, their ratios, and the longest loop turn each
# daemon measured while it ran (INFO loop_max_turn_us, wall time, and
# loop_max_turn_cpu_us, the CPU the loop thread used in its longest turn:
# without the time it waited for a CPU, which on 2 cores shared with
# redis-benchmark and three more daemons is most of the wall figure), and
# the clustered node's longest stretch of replication work in one turn
# (INFO cluster replication_max_slice_us and _cpu_us: the part of a turn
# the replication adds; a turn's whole length is mostly clients' requests,
# 50 clients of 16 pipelined commands each), and its longest replication
# pass (replication_max_pass_ms: a pass starts every 100 ms, and one that
# lasts longer is a replication behind its new keys, whose work then goes
# on after the round); all reset before each round with CONFIG RESETSTAT.
# Last, the CPU each daemon's loop thread used per request (us_cl, us_st;
# node 1's until it went quiet after the round, so its catch-up is in)
# and nodes 2 and 3's together over node 1's rounds (us_2_3): what a
# request costs the cluster, which moves less with the host's scheduling
# than ops/s do (though a shared host's stolen time is counted too).
#   tests/bench/clustered.sh [BUILD_DIR]       (default build)
# Environment: BENCH_SCALE multiplies the request counts (default 1:
# 300,000 per round, about 2 minutes on 2 cores; 0.02 gives the smoke run);
# CLUSTERED_SPACES (default "1000 100000 1000000"); CLUSTERED_CLIENTS
# (default 50) and CLUSTERED_PIPES (default "1 16"), other shapes of the
# same load; CLUSTERED_NODE_ARGS, more flags for the three clustered nodes
# (e.g. "--gossip-mtu 9216"); CLUSTERED_ROUNDS
# (default 3): rounds of each cell, the two daemons in turn and in
# alternating order; a line of medians follows a cell's rounds (one round
# of a pipelined cell lasts under a second, and on a shared 2-core host a
# single one varies by a third).
# This is a benchmark, not a test: it prints figures and exits 0.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
build=${1:-build}
BIN=$(cd "$build/bin" && pwd)
SCALE=${BENCH_SCALE:-1}
SPACES=${CLUSTERED_SPACES:-"1000 100000 1000000"}
ROUNDS=${CLUSTERED_ROUNDS:-3}
CLIENTS=${CLUSTERED_CLIENTS:-50}
PIPES=${CLUSTERED_PIPES:-"1 16"}
read -r -a NODE_ARGS <<<"${CLUSTERED_NODE_ARGS:-}"
command -v redis-benchmark >/dev/null || { echo "clustered: redis-benchmark not found" >&2; exit 1; }

TMP=$(mktemp -d /tmp/sluice-clustered.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

read -r P1 P2 P3 < <(bench_free_ports udp 3)
"$BIN/sluicectl" keygen -o "$TMP/cluster.key" >/dev/null
JOIN="127.0.0.1:$P1,127.0.0.1:$P2,127.0.0.1:$P3"
i=0
for p in $P1 $P2 $P3; do
  i=$((i + 1))
  "$BIN/sluiced" --socket "$TMP/n$i.sock" --node-name "n$i" --gossip-bind "127.0.0.1:$p" \
    --join "$JOIN" --cluster-key-file "$TMP/cluster.key" --log-level warn \
    ${NODE_ARGS[@]+"${NODE_ARGS[@]}"} 2>>"$TMP/nodes.log" &
  PIDS+=($!)
done
"$BIN/sluiced" --socket "$TMP/alone.sock" --log-level warn &
PIDS+=($!)
for s in n1 n2 n3 alone; do bench_wait_sock "$TMP/$s.sock"; done
# Until node 1 sees all three (its global keys then spread over owners).
for _ in $(seq 1 200); do
  redis-cli -s "$TMP/n1.sock" INFO cluster | grep -q '^members_alive:3' && break
  sleep 0.1
done

# round SOCK PIPE SPACE -> "ops_per_s p99_ms max_ms loop_max_turn_us loop_max_turn_cpu_us
#                           replication_max_slice_us replication_max_slice_cpu_us
#                           replication_max_pass_ms catchup_cpu_ms us_per_req peers_us_per_req"
# (the replication fields and the catch-up 0 for the standalone node).
# us_per_req is the CPU the daemon used per request, from the round's
# start until it went quiet after it (for node 1, the catch-up included);
# peers_us_per_req the same for nodes 2 and 3 together over node 1's
# round and catch-up (0 for the standalone node).  The CPU a process uses
# moves far less with the host's scheduling than its ops/s do.
round() {
  local sock=$1 pipe=$2 space=$3 n out stats pid=${PIDS[3]} c0 p0 t0
  n=$(awk -v s="$SCALE" 'BEGIN { v = int(300000 * s); print (v < 2000 ? 2000 : v) }')
  [ "$sock" = "$TMP/n1.sock" ] && pid=${PIDS[0]}
  redis-cli -s "$sock" CONFIG RESETSTAT >/dev/null
  c0=$(cpu_ns "$pid")
  p0=$(($(cpu_ns "${PIDS[1]}") + $(cpu_ns "${PIDS[2]}")))
  out=$(redis-benchmark -s "$sock" -c "$CLIENTS" -P "$pipe" -n "$n" -r "$space" --csv \
    CL.THROTTLE 'key:__rand_int__' 15 30 60 1 2>/dev/null |
    awk -F'","' 'NR==2 { gsub(/"/, "", $2); gsub(/"/, "", $7); gsub(/"/, "", $8); print $2, $7, $8 }')
  t0=$(cpu_ns "$pid") # the daemon's CPU when the round ended
  stats="$out $(redis-cli -s "$sock" INFO stats | tr -d '\r' | awk -F: '$1 == "loop_max_turn_us" { t = $2 } $1 == "loop_max_turn_cpu_us" { c = $2 } END { print t, c }') $(redis-cli -s "$sock" INFO cluster | tr -d '\r' | awk -F: '$1 == "replication_max_slice_us" { t = $2 } $1 == "replication_max_slice_cpu_us" { c = $2 } $1 == "replication_max_pass_ms" { p = $2 } END { print t + 0, c + 0, p + 0 }')"
  local quiet catch peers=0
  quiet=$(settle "$pid")
  catch=$(((quiet - t0) / 1000000))
  if [ "$sock" = "$TMP/n1.sock" ]; then
    peers=$(($(cpu_ns "${PIDS[1]}") + $(cpu_ns "${PIDS[2]}") - p0))
  else
    catch=0
  fi
  echo "$stats $catch $(awk -v c=$((quiet - c0)) -v p="$peers" -v n="$n" 'BEGIN { printf "%.2f %.2f", c / n / 1000, p / n / 1000 }')"
}

# cpu_ns PID -> the CPU its main thread (the event loop) has used, in ns.
cpu_ns() { awk '{ print $1 }' "/proc/$1/schedstat"; }
# settle PID -> its CPU (ns) once it went quiet after a round: a tenth of a
# second with less than 20 ms of CPU, up to 10 s.  The CPU a clustered
# node used between the round's end and then is its catch-up: the
# replication work the round's requests left it (under -P 16 over new keys
# a pass gets a quarter of the loop at most, and the rest of its work is
# done after the round, so the round's ops/s leave it out).  A standalone
# node goes quiet at once.
settle() {
  local pid=$1 a b
  a=$(cpu_ns "$pid")
  for _ in $(seq 1 100); do
    sleep 0.1
    b=$(cpu_ns "$pid")
    [ $((b - a)) -lt 20000000 ] && break
    a=$b
  done
  echo "$a"
}

echo "clustered node (node 1 of 3, owns about a third of its keys) vs standalone, same run"
echo "redis-benchmark -c $CLIENTS -n $(awk -v s="$SCALE" 'BEGIN { v = int(300000 * s); print (v < 2000 ? 2000 : v) }') CL.THROTTLE key:__rand_int__ 15 30 60 1"
printf '%-9s %-4s %11s %11s %8s %8s %8s %8s %9s %9s %8s %8s %8s %8s %7s %8s %6s %6s %6s  %s\n' keys pipe clustered standalone p99_cl p99_st max_cl max_st turn_cl_us turn_st_us cpu_cl cpu_st repl_us repl_cpu pass_ms catch_ms us_cl us_2_3 us_st ratio
# The ratio "with catch-up" counts the round's requests over the round's
# time and the catch-up after it (N / (N / ops + catch-up)).  "CPU per
# request" is node 1's (its catch-up included) over the standalone node's,
# then with nodes 2 and 3 added: what a request costs the cluster.
N_REQ=$(awk -v s="$SCALE" 'BEGIN { v = int(300000 * s); print (v < 2000 ? 2000 : v) }')
row() {
  printf '%-9s %-4s %11.0f %11.0f %8.3f %8.3f %8.3f %8.3f %9s %9s %8s %8s %8s %8s %7s %8s %6.2f %6.2f %6.2f  ratio ops %.2f p99 %.2f with catch-up %.2f, CPU per request x%.2f (x%.2f with nodes 2 and 3)\n' "$@" \
    "$(awk -v a="$3" -v b="$4" 'BEGIN { print a / b }')" \
    "$(awk -v a="$5" -v b="$6" 'BEGIN { print (b > 0 ? a / b : 0) }')" \
    "$(awk -v a="$3" -v b="$4" -v c="${16}" -v n="$N_REQ" 'BEGIN { print n / (n / a + c / 1000) / b }')" \
    "$(awk -v a="${17}" -v b="${19}" 'BEGIN { print (b > 0 ? a / b : 0) }')" \
    "$(awk -v a="${17}" -v p="${18}" -v b="${19}" 'BEGIN { print (b > 0 ? (a + p) / b : 0) }')"
}
for pipe in $PIPES; do
  for space in $SPACES; do
    rows=()
    for k in $(seq 1 "$ROUNDS"); do
      if [ $((k % 2)) -eq 1 ]; then
        read -r ca cp cm ct cc cr cq cs cu cx cy < <(round "$TMP/n1.sock" "$pipe" "$space")
        read -r sa sp sm st sc _ _ _ _ sx _ < <(round "$TMP/alone.sock" "$pipe" "$space")
      else
        read -r sa sp sm st sc _ _ _ _ sx _ < <(round "$TMP/alone.sock" "$pipe" "$space")
        read -r ca cp cm ct cc cr cq cs cu cx cy < <(round "$TMP/n1.sock" "$pipe" "$space")
      fi
      row "$space" "$pipe" "$ca" "$sa" "$cp" "$sp" "$cm" "$sm" "$ct" "$st" "$cc" "$sc" "$cr" "$cq" "$cs" "$cu" "$cx" "$cy" "$sx"
      rows+=("$ca $sa $cp $sp $cm $sm $ct $st $cc $sc $cr $cq $cs $cu $cx $cy $sx")
    done
    if [ "$ROUNDS" -gt 1 ]; then
      # The median of each column, and of each round's ratios.
      printf '%s\n' "${rows[@]}" | awk -v sp="$space" -v pp="$pipe" -v n="$N_REQ" '
        function med(c,   n, i, j, t, v) {
          n = 0
          for (i = 1; i <= NR; i++) v[++n] = col[i, c]
          for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
          return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        }
        { for (c = 1; c <= NF; c++) col[NR, c] = $c; col[NR, 18] = $1 / $2; col[NR, 19] = ($4 > 0 ? $3 / $4 : 0)
          col[NR, 20] = n / (n / $1 + $14 / 1000) / $2
          col[NR, 21] = ($17 > 0 ? $15 / $17 : 0); col[NR, 22] = ($17 > 0 ? ($15 + $16) / $17 : 0) }
        END {
          printf "%-9s %-4s %11.0f %11.0f %8.3f %8.3f %8.3f %8.3f %9.0f %9.0f %8.0f %8.0f %8.0f %8.0f %7.0f %8.0f %6.2f %6.2f %6.2f  median of %d: ratio ops %.2f p99 %.2f with catch-up %.2f, CPU per request x%.2f (x%.2f with nodes 2 and 3)\n",
            sp, pp, med(1), med(2), med(3), med(4), med(5), med(6), med(7), med(8), med(9), med(10), med(11), med(12), med(13), med(14), med(15), med(16), med(17), NR, med(18), med(19), med(20), med(21), med(22)
        }'
    fi
  done
done
redis-cli -s "$TMP/n1.sock" INFO cluster | tr -d '\r' | grep -E '^(global_keys|owned_keys|reports_sent|leases_sent):' | tr '\n' ' '
echo
