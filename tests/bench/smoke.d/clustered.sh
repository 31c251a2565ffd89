#!/usr/bin/env bash
# Smoke run of the clustered-vs-standalone benchmark: 2,000 requests a round,
# 1k and 100k key spaces.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BENCH_SCALE=0.005 CLUSTERED_SPACES="1000 100000" bash "$HERE/clustered.sh" "$1"
