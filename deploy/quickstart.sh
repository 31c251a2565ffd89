#!/usr/bin/env bash
# Installs what is missing (Debian packages), builds sluice, and runs one
# sluiced node in the foreground with default settings, on the default
# socket: a private directory ($XDG_RUNTIME_DIR/sluice, or /tmp/sluice-UID
# made 0700), never a shared name another user could bind first.  Ctrl-C
# stops it and removes its socket.  Extra arguments are passed to sluiced,
# e.g.
#   bash deploy/quickstart.sh --socket "$HOME/sluice.sock"
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh --run   # build and run only; tests/run-all.sh installs the rest
# The programs alone: the tests need packages this script does not install.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_TESTS=OFF >/dev/null
cmake --build build -j "$(nproc)"

SOCK=$(build/bin/sluicectl path)
for ((i = 1; i <= $#; i++)); do
  if [ "${!i}" = "--socket" ]; then j=$((i + 1)); SOCK=${!j}; fi
done

cat <<MSG

sluiced is starting on $SOCK.  In another terminal, try:

  export SLUICE_SOCKET=$SOCK
  redis-cli -s "\$SLUICE_SOCKET" CL.THROTTLE user:42 15 30 3600 1
  build/bin/sluicectl throttle user:42 15 30 3600
  build/bin/sluicectl info

Ctrl-C stops the node.
MSG
exec build/bin/sluiced "$@"
