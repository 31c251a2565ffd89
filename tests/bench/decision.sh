#!/usr/bin/env bash
# Cost of one in-process decision on a warm table (10k keys).  Prints
#   - instructions per decision from callgrind: (Ir(2N) - Ir(N)) / N, so the
#     identical setup cancels out;
#   - ns per decision from a timed loop of 20N decisions (no valgrind).
# Target: <= 100 ns per decision.
#   tests/bench/decision.sh [BUILD_DIR] [N]     (defaults: build, 200000)
set -euo pipefail
build=${1:-build}
n=${2:-200000}
tool="$build/tests/bench_keys"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ir() {
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" "$tool" decide "$1" \
        >/dev/null 2>"$tmp/log.$1"
    awk '/^summary:/ {print $2}' "$tmp/cg.$1"
}
if command -v valgrind >/dev/null; then
    a=$(ir "$n")
    b=$(ir $((2 * n)))
    echo "instructions_per_decision $(( (b - a) / n ))"
else
    echo "valgrind not installed: skipping instruction count"
fi
"$tool" decide $((20 * n)) | grep ns_per_decision
