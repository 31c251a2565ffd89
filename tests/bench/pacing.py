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
Usage: python3 tests/bench/pacing.py [N] (default 1000; PACING_RATES="1000 100")."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sluicetest import Daemon  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)


def pace(r, algo, rate, n):
    key = "pace:%s:%d" % (algo, rate)
    args = ["SL.ACQUIRE", key, "ALGO", algo, "BURST", 0, "RATE", rate, 1000, "TIMEOUT", 5000]
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
    with Daemon() as d:
        r = redis.Redis(unix_socket_path=d.path, socket_timeout=60)
        for algo in ("gcra", "token-bucket"):
            for rate in rates:
                took, worst = pace(r, algo, rate, n)
                ideal = (n - 1) / rate
                print("pacing %s %d/s %d calls: %.4f s, ideal %.4f s, %+.2f%% (max gap %.1f ms)"
                      % (algo, rate, n, took, ideal, 100 * (took - ideal) / ideal, 1000 * worst),
                      flush=True)
        r.close()


if __name__ == "__main__":
    main()
