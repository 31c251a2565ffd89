#!/usr/bin/env bash
# Cluster benchmark: N = 3 and 5 real sluiced nodes on 127.0.0.1 sharing one
# global key, skewed saturating demand, a 5 s freeze (SIGSTOP) of one node and
# a kill -9 + restart of another; prints admitted/oracle ratios and gossip
# bytes per node per second, and draws DIR/cluster-nN.png with gnuplot.
#   tests/bench/cluster.sh [BUILD_DIR] [DIR]      (defaults: build, build/bench)
# Environment: CLUSTER_BENCH_SECONDS (default 30 per size), CLUSTER_BENCH_SIZES
# (default "3 5").  Takes about 2 x (seconds + 5) seconds.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-$build/bench}
mkdir -p "$out"
SLUICE_BIN="$build/bin" /usr/bin/python3 "$HERE/cluster.py" "$out"
if command -v gnuplot >/dev/null; then
  for dat in "$out"/cluster-n*.dat; do
    n=$(basename "$dat" .dat | sed 's/cluster-n//')
    gnuplot -e "data='$dat'; events='$out/cluster-n$n.events'; n=$n; out='$out/cluster-n$n.png'" \
      "$HERE/cluster.gp"
    echo "picture: $out/cluster-n$n.png"
  done
else
  echo "gnuplot not found: no pictures (data in $out)"
fi
