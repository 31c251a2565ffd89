#!/usr/bin/env bash
# Soak: clustered sluiced nodes (3 on 127.0.0.1 by default) under mixed
# load, reloads, freezes, kill -9 restarts, duplicate-name and wrong-key
# starts (and partitions with --netns) for SECONDS of load (default 600),
# then up to 40 s of watching keys drain.  Checks that no daemon dies, every
# request to a live node is answered, RSS stays bounded, keys are reclaimed,
# no healthy member is seen dead, and a global key's admissions match one
# central GCRA.  See tests/soak/soak.py.
#   bash tests/soak/soak.sh BUILD_DIR [SECONDS [soak.py flags, e.g. --nodes 5 --netns]]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: soak.sh BUILD_DIR [SECONDS]}
seconds=${2:-600}
shift $(($# > 1 ? 2 : 1))
exec /usr/bin/python3 "$HERE/soak.py" --bin "$build/bin" --seconds "$seconds" "$@"
