#!/usr/bin/env bash
# Seed sweep: runs simulator scenarios under every seed of a range, one
# process at a time, and prints each failing seed with the command that
# replays it.  The suite runs each scenario under one fixed seed and a few
# random ones (random_seeds.sh); a sweep is how a protocol change is shown to
# hold over thousands of draws before it is merged.
#
#   tests/sim/sweep.sh FROM TO [TEST...]
#
#   FROM TO   the seeds, inclusive (positive integers, FROM <= TO)
#   TEST      scenario binaries to run (default: the five libgossip ones,
#             sim_test_gossip_{membership,restart,direct,security,app});
#             sim_test_global_fleet takes seconds a seed, so sweep it on
#             its own over a shorter range
#
# Environment:
#   SWEEP_BIN    directory of the test binaries (default: build/tests next
#                to this checkout)
#   SWEEP_MAX_S  wall-clock bound for the whole sweep in seconds (default
#                7200); when it is reached the sweep stops, says how far each
#                scenario got and exits 2
#   SWEEP_RUN_S  bound for one run (default 120); a run that exceeds it
#                counts as a failure (a hang is a bug too)
#   SLUICE_SIM_ONLY  passed on: sim_test_gossip_membership then runs only
#                the scenarios matching it (e.g. 'test_stalled*')
#
# Exit status: 0 when every run passed, 1 when any failed, 2 when the time
# bound cut the sweep short (with no failure), 64 on a usage error.  Run it
# under `nice` on a shared machine: it uses one core.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
usage() {
  sed -n '8,16p' "$0" >&2
  exit 64
}
[ $# -ge 2 ] || usage
from=$1 to=$2
shift 2
case "$from$to" in *[!0-9]*) usage ;; esac
[ "$from" -ge 1 ] && [ "$from" -le "$to" ] || usage
BIN=${SWEEP_BIN:-$HERE/../../build/tests}
MAX_S=${SWEEP_MAX_S:-7200}
RUN_S=${SWEEP_RUN_S:-120}
if [ $# -gt 0 ]; then
  tests=("$@")
else
  tests=(sim_test_gossip_membership sim_test_gossip_restart sim_test_gossip_direct
         sim_test_gossip_security sim_test_gossip_app)
fi
for t in "${tests[@]}"; do
  [ -x "$BIN/$t" ] || { echo "sweep: no executable $BIN/$t (set SWEEP_BIN)" >&2; exit 64; }
done

start=$SECONDS
fails=0 cut=0
for t in "${tests[@]}"; do
  t0=$SECONDS n=0 nf=0
  for ((s = from; s <= to; s++)); do
    if [ $((SECONDS - start)) -ge "$MAX_S" ]; then
      echo "CUT  $t: time bound ${MAX_S} s reached after seeds $from..$((s - 1))"
      cut=1
      break
    fi
    out=$(SLUICE_SEED=$s timeout "$RUN_S" "$BIN/$t" 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ]; then
      echo "$out" | grep -E '^\[  (FAILED|ERROR) |LINE|Timeout|ERROR' | head -8 | sed 's/^/     /'
      [ "$rc" -eq 124 ] && echo "     (no result after ${RUN_S} s: killed)"
      echo "FAIL $t seed $s: replay with SLUICE_SEED=$s $BIN/$t"
      nf=$((nf + 1))
    fi
    n=$((n + 1))
  done
  echo "sweep $t: $n seeds from $from, $nf failed, $((SECONDS - t0)) s"
  fails=$((fails + nf))
done
echo "sweep: $fails failure(s) in $((SECONDS - start)) s"
[ "$fails" -gt 0 ] && exit 1
[ "$cut" -gt 0 ] && exit 2
exit 0
