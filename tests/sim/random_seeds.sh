#!/usr/bin/env bash
# Runs every simulator scenario under fresh random seeds, on top of the fixed
# seed the suite uses (SLUICE_SEED, see tests/run-all.sh), so that CI keeps
# exploring the seed space instead of replaying one draw forever.
#
#   random_seeds.sh BINDIR
#
# Each libgossip scenario (well under a second a seed) runs under
# SLUICE_RANDOM_SEEDS seeds (default 4); every other simulator scenario
# built (sim_test_*: the global fleet, global leases; seconds a seed) under
# SLUICE_RANDOM_SEEDS_FLEET (default 1), so a scenario added later is
# covered without editing this list.  Seeds come from /dev/urandom,
# whatever SLUICE_SEED says.  Every failure is printed with the command
# that replays it, and the script exits 1 if any failed (2 if no
# scenario was found: a wrong BINDIR must not pass).
set -u
BIN=${1:?usage: random_seeds.sh BINDIR}
N=${SLUICE_RANDOM_SEEDS:-4}
NF=${SLUICE_RANDOM_SEEDS_FLEET:-1}
fails=0

draw() { od -An -N4 -tu4 /dev/urandom | tr -d ' '; }

run() {
  local t=$1 seed=$2 out
  if ! out=$(SLUICE_SEED=$seed "$BIN/$t" 2>&1); then
    echo "$out" | grep -E 'FAILED|ERROR|LINE' | head -20
    echo "FAIL $t seed $seed: replay with SLUICE_SEED=$seed $BIN/$t"
    fails=$((fails + 1))
  else
    echo "ok   $t seed $seed"
  fi
}

fast=" sim_test_gossip_membership sim_test_gossip_restart sim_test_gossip_direct \
sim_test_gossip_security sim_test_gossip_app "
ran=0
for t in $fast; do
  [ -x "$BIN/$t" ] || { echo "FAIL $t: not built in $BIN"; fails=$((fails + 1)); continue; }
  for _ in $(seq 1 "$N"); do run "$t" "$(draw)"; done
  ran=$((ran + 1))
done
for path in "$BIN"/sim_test_*; do
  t=${path##*/}
  if [ ! -f "$path" ] || [ ! -x "$path" ]; then continue; fi
  case "$fast" in *" $t "*) continue ;; esac
  for _ in $(seq 1 "$NF"); do run "$t" "$(draw)"; done
  ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
  echo "no simulator scenario found in $BIN"
  exit 2
fi
if [ "$fails" -gt 0 ]; then
  echo "$fails simulator run(s) failed under random seeds (see the replay lines above)"
  exit 1
fi
exit 0
