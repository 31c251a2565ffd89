#!/usr/bin/env bash
# A short run of every benchmark, so CI notices when one breaks; the figures
# of such a short run mean little.  Full runs: see README, "Benchmarks".
#   tests/bench/smoke.sh BUILD_DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: smoke.sh BUILD_DIR}
fail=0
check() { # name pattern command...
  local name=$1 pattern=$2; shift 2
  local out
  if ! out=$("$@" 2>&1); then
    echo "bench smoke: $name failed:"; echo "$out"; fail=1; return
  fi
  if ! grep -q "$pattern" <<<"$out"; then
    echo "bench smoke: $name printed no '$pattern':"; echo "$out"; fail=1; return
  fi
  echo "bench smoke: $name ok"; grep "$pattern" <<<"$out" | sed 's/^/  /'
}
check keys bytes_per_key bash "$HERE/keys.sh" "$build" 20000
check decision ns_per_decision bash "$HERE/decision.sh" "$build" 2000
check redis_compare "sluice/Lua" env SLUICE_BIN="$build/bin" BENCH_SCALE=0.02 bash "$HERE/redis_compare.sh"
check rls rls_calls_per_s env BENCH_SCALE=0.02 bash "$HERE/rls.sh" "$build"
check http http_decisions_per_s env BENCH_SCALE=0.02 bash "$HERE/http.sh" "$build"
for extra in "$HERE"/smoke.d/*.sh; do
  [ -e "$extra" ] || continue
  check "$(basename "$extra" .sh)" "ratio" bash "$extra" "$build"
done
exit $fail
