#!/usr/bin/env bash
# Runs every simulator scenario under fresh random seeds, on top of the fixed
# seed the suite uses (SLUICE_SEED, see tests/run-all.sh), so that CI keeps
# exploring the seed space instead of replaying one draw forever.
#
#   random_seeds.sh BINDIR
#
# Each libgossip scenario (well under a second a seed) runs under
# SLUICE_RANDOM_SEEDS seeds (default 4); the global fleet scenario, which
# takes seconds, under SLUICE_RANDOM_SEEDS_FLEET (default 1).  Seeds come
# from /dev/urandom, whatever SLUICE_SEED says.  Every failure is printed
# with the command that replays it, and the script exits 1 if any failed.
set -u
BIN=${1:?usage: random_seeds.sh BINDIR}
N=${SLUICE_RANDOM_SEEDS:-4}
NF=${SLUICE_RANDOM_SEEDS_FLEET:-1}
fails=0

draw() { od -An -N4 -tu4 /dev/urandom | tr -d ' '; }

run() {
  local t=$1 seed=$2 out
  out=$(SLUICE_SEED=$seed "$BIN/$t" 2>&1)
  if [ $? -ne 0 ]; then
    echo "$out" | grep -E 'FAILED|ERROR|LINE' | head -20
    echo "FAIL $t seed $seed: replay with SLUICE_SEED=$seed $BIN/$t"
    fails=$((fails + 1))
  else
    echo "ok   $t seed $seed"
  fi
}

for t in sim_test_gossip_membership sim_test_gossip_restart sim_test_gossip_direct \
         sim_test_gossip_security sim_test_gossip_app; do
  for _ in $(seq 1 "$N"); do run "$t" "$(draw)"; done
done
if [ -x "$BIN/sim_test_global_fleet" ]; then
  for _ in $(seq 1 "$NF"); do run sim_test_global_fleet "$(draw)"; done
fi
if [ "$fails" -gt 0 ]; then
  echo "$fails simulator run(s) failed under random seeds (see the replay lines above)"
  exit 1
fi
exit 0
