# shellcheck shell=bash
# Helpers the side-by-side benchmarks share (rls.sh, http.sh): sourced, not
# run.  Each figure is the median of 3 rounds run in turn, with 50 clients
# (one request in flight each) and with 1.

# N scaled by $BENCH_SCALE, at least 200.
bench_scaled() { awk -v n="$1" -v s="${BENCH_SCALE:-1}" 'BEGIN { v = int(n * s); print (v < 200 ? 200 : v) }'; }

# The middle line of three, by column $1.
bench_median() { sort -n -k"$1","$1" | sed -n 2p; }

# h2load's output ($1) and its --log-file ($2) -> "requests_per_s p99_ms".
bench_h2load_figures() {
  local rps p99
  rps=$(awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) print $(i-1) }' <<<"$1")
  p99=$(awk '{ print $3 }' "$2" | sort -n |
    awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%.3f", v[i] / 1000 }')
  echo "$rps $p99"
}

# redis-benchmark over socket $1 with $2 clients and $3 requests of the
# command in the remaining arguments -> "ops_per_s p99_ms".
bench_resp() {
  local sock=$1 c=$2 n=$3
  shift 3
  redis-benchmark -s "$sock" -c "$c" -n "$n" --csv "$@" 2>/dev/null |
    awk -F'","' 'NR==2 { gsub(/"/, "", $2); gsub(/"/, "", $7); print $2, $7 }'
}

# bench_side_by_side NAME_A LABEL_A FN_A NAME_B LABEL_B FN_B: runs FN_A and
# FN_B (each called with CLIENTS N, printing "per_s p99_ms") 3 times in turn
# for 50 clients and for 1, and prints
#   NAME_A_LABEL_A_per_s, NAME_A_p99_ms, the same for B, and the ratios.
bench_side_by_side() {
  local na=$1 la=$2 fa=$3 nb=$4 lb=$5 fb=$6 clients n
  for clients in 50 1; do
    n=$(bench_scaled $(( clients == 1 ? 20000 : 200000 )))
    local ra=() rb=()
    for _ in 1 2 3; do
      ra+=("$("$fa" "$clients" "$n")")
      rb+=("$("$fb" "$clients" "$n")")
    done
    local a_rps a_p99 b_rps b_p99
    a_rps=$(printf '%s\n' "${ra[@]}" | bench_median 1 | awk '{ print $1 }')
    a_p99=$(printf '%s\n' "${ra[@]}" | bench_median 2 | awk '{ print $2 }')
    b_rps=$(printf '%s\n' "${rb[@]}" | bench_median 1 | awk '{ print $1 }')
    b_p99=$(printf '%s\n' "${rb[@]}" | bench_median 2 | awk '{ print $2 }')
    echo "clients=$clients requests=$n"
    printf '  %-22s %10.0f   %-13s %7.3f\n' "${na}_${la}_per_s" "$a_rps" "${na}_p99_ms" "$a_p99"
    printf '  %-22s %10.0f   %-13s %7.3f\n' "${nb}_${lb}_per_s" "$b_rps" "${nb}_p99_ms" "$b_p99"
    awk -v a="$a_p99" -v b="$b_p99" -v x="$a_rps" -v y="$b_rps" -v na="$na" -v nb="$nb" \
      'BEGIN { printf "  ratio %s/%s: calls %.2f, p99 %.2f\n", na, nb, x / y, (b > 0 ? a / b : 0) }'
  done
}

# N ports on 127.0.0.1 free for PROTO (tcp or udp) now, as the kernel
# hands them out (bound at once, then released), on one line.  A port
# drawn at random instead (20000-40000) could be one another process
# held, or an outgoing connection's: the daemon then failed to listen.
bench_free_ports() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import socket, sys
kind = socket.SOCK_STREAM if sys.argv[1] == "tcp" else socket.SOCK_DGRAM
ss = [socket.socket(socket.AF_INET, kind) for _ in range(int(sys.argv[2]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
PY
}

# A bounded wait (10 s) for a Unix socket ($1) that answers PING; exits the
# calling script when it does not.
bench_wait_sock() {
  for _ in $(seq 1 200); do
    redis-cli -s "$1" PING >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "$(basename "$0"): $1 did not come up" >&2
  exit 1
}
