#!/usr/bin/python3
"""--gossip-mtu on real daemons: larger datagrams, the same limits.

Three sluiced processes on 127.0.0.1: nodes 1 and 2 with --gossip-mtu 9000,
node 3 with the default (1400), as during a rolling change of the setting.

  1. node 1, serving 3,000 global keys, sends replication reports of more
     than 1,400 bytes on average (the datagrams are larger), node 3 none
     larger than 1,400;
  2. keys asked at three times their limit, every request sent to a random
     node, admit what one central GCRA admits for the same requests at the
     same times, within 10% and 3 units: the nodes of both settings read
     each other's datagrams;
  3. the membership holds: every node sees the three alive.

Every load loop is bounded in count and time; every process is stopped at
the end, even on failure.
"""
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402
from test_cluster import Cluster  # noqa: E402
from test_global_long_keys import run_load  # noqa: E402

N = 3
MTU = 9000
KEYS = 3000
BURST, COUNT, PERIOD = 4, 10, 1
DEMAND = 3.0
SECONDS = 8.0


class MixedCluster(Cluster):
    def args(self, i, keyfile=None, port=None, name=None):
        extra = ["--gossip-mtu", str(MTU)] if i < 2 else []
        return super().args(i, keyfile, port, name) + extra


def fill(c, i, n, deadline):
    """n CL.THROTTLE commands for keys mtu:0..n-1 on node i, pipelined
    from a thread while the replies are read here."""
    buf = b"".join(sluicetest.resp_command("CL.THROTTLE", "mtu:%d" % k, 100, 1, 60)
                   for k in range(n))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30.0)
    s.connect(c.sock(i))
    sender = threading.Thread(target=s.sendall, args=(buf,), daemon=True)
    sender.start()
    got = bytearray()
    while got.count(b"*5\r\n") < n:
        assert time.monotonic() < deadline, "the load took too long"
        chunk = s.recv(1 << 20)
        assert chunk, "connection closed during the load"
        got += chunk
    sender.join(timeout=max(0.0, deadline - time.monotonic()))
    s.close()


def report_size(c, i):
    with c.client(i) as r:
        st = r.info("cluster")
    n = int(st.get("reports_sent", 0))
    return n, (int(st.get("report_bytes_sent", 0)) / n if n else 0.0)


def main():
    seed = int(os.environ.get("SLUICE_SEED", "1"))
    print("test_gossip_mtu: seed %d (SLUICE_SEED replays)" % seed)
    tmpdir = tempfile.mkdtemp(prefix="sluice-mtu-")
    c = MixedCluster(N, tmpdir)
    try:
        c.start_all()
        c.wait_members([c.name(i) for i in range(N)])

        # 1. larger datagrams where the setting says so
        fill(c, 0, KEYS, time.monotonic() + 60)
        fill(c, 2, KEYS, time.monotonic() + 60)

        def reported():
            return report_size(c, 0)[0] > 0 and report_size(c, 2)[0] > 0
        sluicetest.wait_until(reported, timeout=20, what="nodes 1 and 3 report")
        time.sleep(1.0)
        (n1, avg1), (n3, avg3) = report_size(c, 0), report_size(c, 2)
        print("  node 1 (--gossip-mtu %d): %d reports, %.0f bytes on average" % (MTU, n1, avg1))
        print("  node 3 (default):          %d reports, %.0f bytes on average" % (n3, avg3))
        assert avg1 > 1400, "node 1's reports average %.0f bytes" % avg1
        assert avg3 <= 1400, "node 3's reports average %.0f bytes" % avg3

        # 2. the limits hold across both settings
        rnd = random.Random(seed)
        per_node = [[] for _ in range(N)]
        keys = ["spread:%d" % k for k in range(6)]
        for k in keys:
            sluicetest.poisson_spread(rnd, k, DEMAND * COUNT / PERIOD, SECONDS, per_node)
        for lst in per_node:
            lst.sort()
        answers, errors = run_load(c, per_node, (BURST, COUNT, PERIOD), SECONDS)
        assert not errors, errors[:3]
        failed = []
        for k in keys:
            mine = sorted((a[0], 0, a[1], a[2]) for a in answers if a[1] == k)
            ok = sum(1 for a in mine if a[3])
            orc = sluicetest.gcra_oracle(mine, BURST, COUNT / PERIOD)
            print("  %s: %3d requests, admitted %3d, one central GCRA %3d" %
                  (k, len(mine), ok, orc))
            if abs(ok - orc) > 0.10 * orc + 3:
                failed.append("%s: admitted %d, oracle %d" % (k, ok, orc))
        assert not failed, failed

        # 3. nobody fell out of the membership
        c.wait_members([c.name(i) for i in range(N)], timeout=5)
        print("test_gossip_mtu: OK")
    finally:
        bad = c.stop_all()
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert not bad, bad


if __name__ == "__main__":
    main()
