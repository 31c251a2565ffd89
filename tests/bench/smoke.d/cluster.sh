#!/usr/bin/env bash
# Smoke run of the cluster benchmark: 3 nodes for 8 s, pictures into a temp dir.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
CLUSTER_BENCH_SECONDS=8 CLUSTER_BENCH_SIZES=3 bash "$HERE/cluster.sh" "$1" "$out"
