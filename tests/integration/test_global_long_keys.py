#!/usr/bin/python3
"""Global keys longer than a replication message, on real daemons.

`--max-key-bytes` allows keys up to a mebibyte, but a replication message
is one datagram (1,200 bytes of entries).  A global key too long for it
could not be reported to its owner: each node held it alone and three
nodes admitted 2.7 times one central limiter (keys of 1,190 to 4,096
bytes), a key over 4,096 bytes was refused with an error, and a global
concurrency key over about 1,150 bytes was never leased.  Checked here on
three sluiced processes on 127.0.0.1 started with --max-key-bytes 65536:

  1. keys of 513, 1,300, 5,000 and 60,000 bytes, a short key that starts
     with byte 0xFF (named by its digest too) and a short control key,
     each asked at three times its limit with every request sent to a
     random node, admit what one central GCRA admits for the same
     requests at the same times, within 10% and 3 units, as the control
     key does;
  2. SL.KEY finds a long key's global state on every node;
  3. SL.LEASE on a global key longer than 512 bytes is refused with an
     error that says why; one of 512 bytes is leased (once its owner has
     lent this node slots).

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
from test_cluster import Cluster  # noqa: E402

import redis  # noqa: E402

N = 3
SECONDS = 8.0
BURST, COUNT, PERIOD = 4, 10, 1  # 5 at once, 10 a second
DEMAND = 3.0  # times the limit
LENGTHS = (513, 1300, 5000, 60000)


def keys():
    out = [b"control:short"]
    for n in LENGTHS:
        head = b"long:%d:" % n
        out.append(head + b"x" * (n - len(head)))
    out.append(b"\xffbinary:short")
    return out


def check_throttle(c, seed, names):
    """Asks each key of names at DEMAND times its limit for SECONDS, every
    request on a random node, and checks that each admits what one central
    GCRA admits for the same requests at the same times, within 10% and 3
    units."""
    rnd = random.Random(seed)
    per_node = [[] for _ in range(c.n)]
    for k in names:
        sluicetest.poisson_spread(rnd, k, DEMAND * COUNT / PERIOD, SECONDS, per_node)
    for lst in per_node:
        lst.sort()
    answers, errors = sluicetest.throttle_load(c.client, per_node,
                                               lambda k: (BURST, COUNT, PERIOD), SECONDS)
    assert not errors, errors[:3]
    failed = []
    for k in names:
        mine = sorted((a[0], 0, a[1], a[2]) for a in answers if a[1] == k)
        ok = sum(1 for a in mine if a[3])
        orc = sluicetest.gcra_oracle(mine, BURST, COUNT / PERIOD)
        print("  key of %5d bytes: %3d requests, admitted %3d, one central GCRA %3d (%.2f)" %
              (len(k), len(mine), ok, orc, ok / orc))
        if abs(ok - orc) > 0.10 * orc + 3:
            failed.append("key of %d bytes: admitted %d, oracle %d" % (len(k), ok, orc))
    assert not failed, failed


def check_key_info(c):
    k = keys()[3]  # 5,000 bytes
    for i in range(N):
        with c.client(i) as r:
            rep = r.execute_command("SL.KEY", k)
        assert rep is not None, "node %d: SL.KEY found no global state for a long key" % i
        fields = dict(zip(rep[0::2], rep[1::2]))
        assert fields.get(b"scope") == b"global", fields


def check_lease(c):
    with c.client(0) as r:
        try:
            r.execute_command("SL.LEASE", b"L" * 513, "CONCURRENCY", 2, "SCOPE", "global")
            raise AssertionError("a 513-byte global concurrency key was leased")
        except redis.ResponseError as e:
            assert "too long for a global concurrency limit" in str(e), e
        # A new global key's first lease waits for the slots its owner lends.
        rep = r.execute_command("SL.LEASE", b"L" * 512, "CONCURRENCY", 2, "SCOPE", "global",
                                "TIMEOUT", 5000)
        assert rep[0] == 0, rep


def main():
    seed = int(os.environ.get("SLUICE_SEED", "1"))
    print("test_global_long_keys: seed %d (SLUICE_SEED replays)" % seed)
    tmpdir = tempfile.mkdtemp(prefix="sluice-longkeys-")
    c = Cluster(N, tmpdir, extra=["--max-key-bytes", "65536"])
    try:
        c.start_ready()
        check_throttle(c, seed, keys())
        check_key_info(c)
        check_lease(c)
        print("test_global_long_keys: OK")
    finally:
        bad = c.stop_all()
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert not bad, bad


if __name__ == "__main__":
    main()
