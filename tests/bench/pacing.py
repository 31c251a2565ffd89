#!/usr/bin/python3
"""Pacing with SL.ACQUIRE: N sequential calls (one client, each sent when
the previous answer arrives) on one key at RATE per second, burst 0, and
the time they take against the schedule's (N-1)/RATE seconds (the first
passes at once).  The brief's target: within 1% for 1,000 calls at 1,000/s
and at 100/s.  A caller late for its slot by less than 20 ms (a stall of
the client, the daemon or the host) is charged at the slot and catches up;
a longer stall restarts the schedule, so the line also gives the longest
gap between answers.  Prints one line per case:
  pacing ALGO RATE/s N calls: ELAPSED s, ideal IDEAL s, +X.XX% (max gap G ms)
With PACING_SCOPE=global the key is global (SCOPE global) on a daemon
that runs a cluster of one (--gossip-bind on loopback), so the calls go
through the cluster's replica instead of the limiter.  PACING_BURST=B
paces with BURST B (the first B+1 pass at once; the ideal is then
(N-1-B)/RATE).
Usage: python3 tests/bench/pacing.py [N] (default 1000; PACING_RATES="1000 100";
PACING_SCOPE=local|global)."""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sluicetest import Daemon, free_udp_ports, write_cluster_key  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)


def pace(r, algo, rate, n, scope="local", burst=0):
    key = "pace:%s:%s:%d" % (scope, algo, rate)
    args = ["SL.ACQUIRE", key, "ALGO", algo, "BURST", burst, "RATE", rate, 1000, "TIMEOUT",
            5000, "SCOPE", scope]
    t0 = time.monotonic()
    last, gaps = t0, []
    for _ in range(n):
        got = r.execute_command(*args)
        if got[0] != 0:
            raise SystemExit("refused: %r" % (got,))
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    return last - t0, max(gaps[1:] or [0])


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rates = [int(x) for x in os.environ.get("PACING_RATES", "1000 100").split()]
    scope = os.environ.get("PACING_SCOPE", "local")
    burst = int(os.environ.get("PACING_BURST", "0"))
    args = []
    tmp = tempfile.mkdtemp(prefix="sluice-pacing-")
    if scope == "global":
        key = os.path.join(tmp, "c.key")
        write_cluster_key(key)
        args = ["--node-name", "a", "--gossip-bind", "127.0.0.1:%d" % free_udp_ports(1)[0],
                "--cluster-key-file", key]
    try:
        with Daemon(*args, tmpdir=tmp) as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=60)
            if scope == "global":
                # A node starting up admits global keys on no share until
                # its replica has synced (README, "A cluster"): pace after.
                deadline = time.monotonic() + 30
                while r.info("cluster").get("synced") != "yes":
                    if time.monotonic() > deadline:
                        raise SystemExit("the replica did not sync within 30 s")
                    time.sleep(0.1)
            for algo in ("gcra", "token-bucket"):
                for rate in rates:
                    took, worst = pace(r, algo, rate, n, scope, burst)
                    ideal = (n - 1 - burst) / rate
                    print("pacing %s %s burst %d %d/s %d calls: %.4f s, ideal %.4f s, %+.2f%% "
                          "(max gap %.1f ms)" % (scope, algo, burst, rate, n, took, ideal,
                                                 100 * (took - ideal) / ideal, 1000 * worst),
                          flush=True)
            r.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
