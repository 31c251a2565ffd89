#!/usr/bin/python3
"""Global limits whose requests are spread over the nodes, on real daemons.

The everyday shape of a per-user limit behind a load balancer: each key's
requests arrive at random (Poisson) on any of five nodes, each node seeing
a trickle.  Three groups of keys at half their limit, at their limit and at
ten times it, all at once, for 12 s.  Every answer is compared with one
central GCRA per key replaying the same requests at the times they were
sent (the oracle):

  - below: the cluster refuses at most one point more of the requests
    than the oracle (availability first: traffic under the limit passes;
    0.0 to 0.3 points are measured at half the limit, up to 1.3 before a
    node out of units asked its owner at once; three points under the
    sanitizers, whose daemons run two to three times slower);
  - above: no key admits more, over any window, than its envelope (rate x
    window + burst + 1) plus the bound stated in the README
    (2 (burst + 1 + 14 r) + 3 N units);
  - at ten times the limit the cluster admits within 5% of the oracle.

Beside them, two groups of slow keys (30 a minute, burst 1: thin keys,
README "The bound"), at their rate and at ten times it: the same checks,
and at ten times the limit within 15% of the oracle (a key admits about
8 units in 12 s, so a unit is 12%; 1.04 to 1.07 is measured, 1.25 and
1.30 before thin keys, when each node's first touch added one).

Every load loop is bounded in count and time; every process is stopped at
the end, even on failure.
"""
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402
from test_global_fleet import Cluster  # noqa: E402


N = 5
SECONDS = 12.0
# name: (demand in limits, burst, count, period in s); fast: 5 at once, 10
# per second; slow: 2 at once, 30 a minute
GROUPS = {"half": (0.5, 4, 10, 1), "at": (1.0, 4, 10, 1), "ten": (10.0, 4, 10, 1),
          "slow-at": (1.0, 1, 30, 60), "slow-ten": (10.0, 1, 30, 60)}
KEYS = 12  # per group


def schedule(seed):
    """Per node, the (time, key) of every request it gets: each key's
    Poisson stream at demand x its rate, each request on a random node."""
    rnd = random.Random(seed)
    per_node = [[] for _ in range(N)]
    for g, (demand, _, count, period) in GROUPS.items():
        rate = count / period
        for k in range(KEYS):
            sluicetest.poisson_spread(rnd, "spread:%s:%d" % (g, k), demand * rate, SECONDS,
                                      per_node)
    for lst in per_node:
        lst.sort()
    return per_node


def excess(times, burst, rate):
    """The largest excess, in units, of admissions over the envelope
    rate x window + burst + 1 over any window (times sorted)."""
    worst, low = 0.0, 0.0
    for n, t in enumerate(times):
        x = n - rate * t  # admitted before this one, less the refill
        low = min(low, x)
        worst = max(worst, x + 1 - low - (burst + 1))
    return worst


def main():
    seed = int(os.environ.get("SLUICE_SEED", "1"))
    print("test_global_spread: seed %d (SLUICE_SEED replays)" % seed)
    tmpdir = tempfile.mkdtemp(prefix="sluice-spread-")
    c = Cluster(N, tmpdir)
    try:
        c.start_all()
        c.wait_members(range(N))

        # as a load balancer would, send only to ready nodes
        sluicetest.wait_cluster_ready(c.client, N)
        answers, errors = sluicetest.throttle_load(
            c.client, schedule(seed), lambda key: GROUPS[key.split(":")[1]][1:], SECONDS)
        assert not errors, errors[:3]
        failed = []
        for g, (demand, burst, count, period) in GROUPS.items():
            rate = count / period
            # 2 (burst + 1 + 14 r) + 3 N; r: the refill of one 100 ms interval
            bound = 2 * (burst + 1 + 14 * rate * 0.1) + 3 * N
            mine = sorted(a for a in answers if a[1].startswith("spread:%s:" % g))
            sent = len(mine)
            ok = sum(1 for a in mine if a[2])
            orc = 0
            worst = 0.0
            for k in range(KEYS):
                key = "spread:%s:%d" % (g, k)
                ans = [(a[0], 0, key, a[2]) for a in mine if a[1] == key]
                orc += sluicetest.gcra_oracle(ans, burst, rate)
                worst = max(worst, excess([a[0] for a in ans if a[3]], burst, rate))
            refused, orc_refused = (sent - ok) / sent, (sent - orc) / sent
            print("    refused by second: %s" % [sum(1 for a in mine if int(a[0]) == s and not a[2])
                                               for s in range(int(SECONDS))])
            print("  %-4s (demand %4.1f): %5d requests, refused %5.1f%% (one central GCRA "
                  "%5.1f%%), admitted/oracle %.3f, worst key %.1f units above its envelope "
                  "(bound %d)" % (g, demand, sent, 100 * refused, 100 * orc_refused, ok / orc,
                                  worst, bound))
            # Under the sanitizers the daemons run two to three times slower
            # and leases arrive later: a wider allowance there (the figure
            # that matters is the release build's).
            allow = 0.03 if "ASAN_OPTIONS" in os.environ else 0.01
            if refused > orc_refused + allow:
                failed.append("%s: refused %.3f > oracle %.3f + %.2f" %
                              (g, refused, orc_refused, allow))
            if worst > bound:
                failed.append("%s: a key %.1f units above its envelope" % (g, worst))
            # A slow key admits about 8 units in 12 s: one is 12%.
            tol = 0.05 if period == 1 else (0.20 if "ASAN_OPTIONS" in os.environ else 0.15)
            if demand >= 10 and abs(ok / orc - 1) > tol:
                failed.append("%s: admitted/oracle %.3f" % (g, ok / orc))
        assert not failed, failed
        print("test_global_spread: OK")
    finally:
        c.stop_all()
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
