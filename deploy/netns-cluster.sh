#!/usr/bin/env bash
# Starts an N-host sluice cluster on one machine, each "host" a network
# namespace with its own address, and tears everything down on exit.
#
#   sudo deploy/netns-cluster.sh [N] [SECONDS]     (defaults: 3, 0 = until Ctrl-C)
#
# Layout (nothing is changed in the machine's own network namespace):
#
#   netns slc-hub-PID:   bridge br0
#                          |        |        |
#   netns slc-1-PID:     eth0      ...      netns slc-N-PID: eth0
#                        10.77.0.1/24                         10.77.0.N/24
#
# Each namespace runs one sluiced gossiping on 10.77.0.i:7946 and joining all
# the others, sharing a fresh cluster key.  Clients reach node i through its
# Unix socket, printed at start (Unix sockets do not care about network
# namespaces).  The script waits until node 1 sees N alive members and prints
#   cluster: N of N members alive
# (or "cluster: only K of N members alive" and exit status 1 after 20 s).
# Tear-down on exit (normal, error or Ctrl-C) stops every daemon and deletes
# every namespace it created.
#
# Environment: SLUICE_BIN (default build/bin), SLUICE_NETNS_SUBNET (default
# 10.77.0), extra sluiced flags in SLUICED_ARGS.
set -euo pipefail

N=${1:-3}
SECONDS_TO_RUN=${2:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SLUICE_BIN:-$ROOT/build/bin}
NET=${SLUICE_NETNS_SUBNET:-10.77.0}
TAG=$$
HUB=slc-hub-$TAG
DIR=$(mktemp -d /tmp/sluice-netns-XXXXXX)
declare -a PIDS=() NSS=()

if ! [[ $N =~ ^[0-9]+$ ]] || [ "$N" -lt 1 ] || [ "$N" -gt 200 ]; then
  echo "netns-cluster: N must be 1..200" >&2
  exit 2
fi
for b in sluiced sluicectl; do
  [ -x "$BIN/$b" ] || { echo "netns-cluster: $BIN/$b not found (set SLUICE_BIN)" >&2; exit 2; }
done

cleanup() {
  set +e
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for ns in "${NSS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$HUB"
NSS+=("$HUB")
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" link set br0 up
ip -n "$HUB" link set lo up

JOIN=""
for i in $(seq 1 "$N"); do
  JOIN+="${JOIN:+,}$NET.$i:7946"
done
"$BIN/sluicectl" keygen >"$DIR/cluster.key"
chmod 600 "$DIR/cluster.key"

for i in $(seq 1 "$N"); do
  ns=slc-$i-$TAG
  ip netns add "$ns"
  NSS+=("$ns")
  # The veth is created inside the node's namespace; its peer moves to the hub.
  ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$HUB"
  ip -n "$HUB" link set "p$i" master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$NET.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
done

for i in $(seq 1 "$N"); do
  ns=slc-$i-$TAG
  # shellcheck disable=SC2086
  ip netns exec "$ns" "$BIN/sluiced" --socket "$DIR/n$i.sock" --node-name "host$i" \
    --gossip-bind "$NET.$i:7946" --join "$JOIN" --cluster-key-file "$DIR/cluster.key" \
    --gossip-probe-interval-ms 500 ${SLUICED_ARGS:-} >"$DIR/n$i.log" 2>&1 &
  PIDS+=($!)
  echo "host$i: $NET.$i:7946  socket $DIR/n$i.sock  log $DIR/n$i.log"
done

alive=0
for _ in $(seq 200); do
  if [ -S "$DIR/n1.sock" ]; then
    alive=$("$BIN/sluicectl" -s "$DIR/n1.sock" members 2>/dev/null | grep -c ' alive ' || true)
    [ "$alive" -ge "$N" ] && break
  fi
  sleep 0.1
done
if [ "$alive" -lt "$N" ]; then
  echo "cluster: only $alive of $N members alive"
  for i in $(seq 1 "$N"); do echo "--- host$i"; tail -5 "$DIR/n$i.log"; done
  exit 1
fi
echo "cluster: $N of $N members alive"
"$BIN/sluicectl" -s "$DIR/n1.sock" members

if [ "$SECONDS_TO_RUN" -gt 0 ]; then
  sleep "$SECONDS_TO_RUN"
else
  echo "running; Ctrl-C tears everything down"
  while true; do sleep 3600; done
fi
