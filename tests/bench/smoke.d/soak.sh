#!/usr/bin/env bash
# Smoke run of the soak: 20 s of load (about a minute in all, most of it
# waiting for global keys to be collected).  Prints "soak ratio ...".
set -euo pipefail
HERE=$(cd "$(dirname "$0")/../.." && pwd)
bash "$HERE/soak/soak.sh" "$1" 20
