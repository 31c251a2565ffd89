#!/usr/bin/env bash
# Memory per key: inserts N limited keys ("user:%d", CL.THROTTLE 15 30 60 1)
# through the limiter and prints RSS bytes per key.  Target: <= 128.
#   tests/bench/keys.sh [BUILD_DIR] [N]     (defaults: build, 1000000)
set -euo pipefail
build=${1:-build}
n=${2:-1000000}
"$build/tests/bench_keys" keys "$n"
