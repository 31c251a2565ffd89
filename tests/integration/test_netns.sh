#!/usr/bin/env bash
# deploy/netns-cluster.sh smoke test: a 3-host cluster in network namespaces
# forms (every node alive in host1's member list, each at its own 10.x
# address), runs a few seconds, answers a global CL.THROTTLE, and leaves no
# namespace, process or directory behind.  Prints a SKIP line and passes when
# network namespaces cannot be created here (not root, no CAP_NET_ADMIN).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export SLUICE_BIN=${SLUICE_BIN:-$ROOT/build/bin}
# A subnet of its own, so a cluster someone runs by hand is not disturbed.
export SLUICE_NETNS_SUBNET=10.78.$((RANDOM % 250))

probe=slc-probe-$$
if ! ip netns add "$probe" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root or CAP_NET_ADMIN)"
  exit 0
fi
ip netns del "$probe"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout 120 bash "$ROOT/deploy/netns-cluster.sh" 3 4 >"$out" 2>&1 &
pid=$!
fail=0
# While it runs: once the cluster has formed, ask node 1 for a global key.
for _ in $(seq 300); do
  grep -q '^cluster:' "$out" && break
  sleep 0.1
done
sock=$(sed -n 's/^host1: .* socket \([^ ]*\) .*/\1/p' "$out")
if grep -q '^cluster: 3 of 3 members alive' "$out" && [ -n "$sock" ]; then
  reply=$("$SLUICE_BIN/sluicectl" -s "$sock" throttle netns:key 5 10 1 2>&1)
  echo "global throttle through host1: $reply"
  case $reply in allowed*|limited*) ;; *) echo "FAIL: no decision from host1"; fail=1 ;; esac
  info=$("$SLUICE_BIN/sluicectl" -s "$sock" info cluster 2>&1)
  grep -q '^members_alive:3' <<<"$info" || { echo "FAIL: INFO cluster: $info"; fail=1; }
else
  echo "FAIL: the cluster did not form:"
  cat "$out"
  fail=1
fi
wait "$pid"
status=$?
cat "$out"
for ip_ in 1 2 3; do
  grep -q "host$ip_ .*${SLUICE_NETNS_SUBNET}.$ip_:7946 .*alive" "$out" ||
    { echo "FAIL: host$ip_ not alive at ${SLUICE_NETNS_SUBNET}.$ip_"; fail=1; }
done
[ "$status" -eq 0 ] || { echo "FAIL: netns-cluster.sh exited $status"; fail=1; }
# Only what this run made: the script names its namespaces slc-*-PID
# (PID its own) and keeps its daemons' sockets in one directory.
mine=$(ip netns list | awk '{print $1}' | grep -E "^slc-[a-z0-9]+-$pid\$" || true)
if [ -n "$mine" ]; then
  echo "FAIL: namespaces left behind: $mine"; fail=1
fi
if [ -n "$sock" ] && pgrep -f -- "$(dirname "$sock")/" >/dev/null; then
  echo "FAIL: daemons left behind"; fail=1
fi
[ "$fail" -eq 0 ] && echo "PASS"
exit "$fail"
