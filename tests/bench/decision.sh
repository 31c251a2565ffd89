#!/usr/bin/env bash
# Cost of one in-process decision on a warm table (10k keys).  Prints
#   - instructions per decision from callgrind: (Ir(2N) - Ir(N)) / N, so the
#     identical setup cancels out, for a local key and for a global key (a
#     lone clustered node), both through the decision entry as CL.THROTTLE
#     calls it (global/decide.h), and their ratio;
#   - ns per decision from a timed loop of 20N decisions (no valgrind), and
#     per lease and release.
# Targets: <= 100 ns per decision; a global decision <= 2x a local one; a
# concurrency lease (SL.LEASE's decision plus its release) <= 2x a local one.
#   tests/bench/decision.sh [BUILD_DIR] [N]     (defaults: build, 200000)
set -euo pipefail
build=${1:-build}
n=${2:-200000}
tool="$build/tests/bench_keys"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ir() { # mode count
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1.$2" "$tool" "$1" "$2" \
        >/dev/null 2>"$tmp/log.$1.$2"
    awk '/^summary:/ {print $2}' "$tmp/cg.$1.$2"
}
if command -v valgrind >/dev/null; then
    local_ir=$(( ($(ir decide $((2 * n))) - $(ir decide "$n")) / n ))
    global_ir=$(( ($(ir global-decide $((2 * n))) - $(ir global-decide "$n")) / n ))
    echo "instructions_per_decision $local_ir"
    echo "instructions_per_global_decision $global_ir"
    awk -v g="$global_ir" -v l="$local_ir" 'BEGIN { printf "global_over_local %.2f\n", g / l }'
    # a concurrency lease: its decision and its release, against a throttle
    lease_ir=$(( ($(ir lease $((2 * n))) - $(ir lease "$n")) / n ))
    echo "instructions_per_lease_and_release $lease_ir"
    awk -v g="$lease_ir" -v l="$local_ir" 'BEGIN { printf "lease_over_local %.2f\n", g / l }'
else
    echo "valgrind not installed: skipping instruction count"
fi
"$tool" decide $((20 * n)) | grep ns_per_decision
"$tool" global-decide $((20 * n)) | sed 's/ns_per_decision/ns_per_global_decision/' |
    grep ns_per_global_decision
"$tool" lease $((20 * n)) | sed 's/ns_per_decision/ns_per_lease_and_release/' |
    grep ns_per_lease_and_release
