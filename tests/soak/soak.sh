#!/usr/bin/env bash
# Soak: 3 clustered sluiced nodes on 127.0.0.1 under mixed load, reloads,
# freezes and kill -9 restarts for SECONDS of load (default 600), then up to
# 40 s of watching keys drain.  Checks that no daemon dies, every request to
# a live node is answered, RSS stays bounded, keys are reclaimed and a global
# key's admissions match one central GCRA.  See tests/soak/soak.py.
#   bash tests/soak/soak.sh BUILD_DIR [SECONDS]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: soak.sh BUILD_DIR [SECONDS]}
seconds=${2:-600}
exec /usr/bin/python3 "$HERE/soak.py" --bin "$build/bin" --seconds "$seconds"
