#!/usr/bin/env bash
# Installs what is missing (Debian packages), builds sluice, and runs one
# sluiced node in the foreground with default settings.  Ctrl-C stops it and
# removes its socket.  Extra arguments are passed to sluiced, e.g.
#   bash deploy/quickstart.sh --socket /tmp/other.sock
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

SOCK=${SLUICE_SOCKET:-/tmp/sluice.sock}
for ((i = 1; i <= $#; i++)); do
  if [ "${!i}" = "--socket" ]; then j=$((i + 1)); SOCK=${!j}; fi
done

cat <<MSG

sluiced is starting on $SOCK.  In another terminal, try:

  redis-cli -s $SOCK CL.THROTTLE user:42 15 30 60 1
  build/bin/sluicectl -s $SOCK throttle user:42 15 30 60
  build/bin/sluicectl -s $SOCK info

Ctrl-C stops the node.
MSG
exec build/bin/sluiced --socket "$SOCK" "$@"
