#!/usr/bin/python3
"""--gossip-mtu on real daemons: larger datagrams, the same limits.

Three sluiced processes on 127.0.0.1: nodes 1 and 2 with --gossip-mtu 9000,
node 3 with the default (1400), as during a rolling change of the setting.

  1. node 1, serving 3,000 global keys (test_global_quiet_keys's load),
     sends replication reports of more than 1,400 bytes on average (the
     datagrams are larger), node 3 none larger than 1,400;
  2. keys asked at three times their limit, every request sent to a random
     node, admit what one central GCRA admits for the same requests at the
     same times, within 10% and 3 units (test_global_long_keys's check):
     the nodes of both settings read each other's datagrams;
  3. the membership holds: every node sees the three alive.

Every load loop is bounded in count and time; every process is stopped at
the end, even on failure.
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402
from test_cluster import Cluster  # noqa: E402
from test_global_long_keys import check_throttle  # noqa: E402
from test_global_quiet_keys import load  # noqa: E402

N = 3
MTU = 9000
KEYS = 3000


class MixedCluster(Cluster):
    def args(self, i, keyfile=None, port=None, name=None):
        extra = ["--gossip-mtu", str(MTU)] if i < 2 else []
        return super().args(i, keyfile, port, name) + extra


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
        c.start_ready()

        # 1. larger datagrams where the setting says so
        load(c.sock(0), KEYS, time.monotonic() + 60)
        load(c.sock(2), KEYS, time.monotonic() + 60)

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
        check_throttle(c, seed, ["spread:%d" % k for k in range(6)])

        # 3. nobody fell out of the membership
        c.wait_members([c.name(i) for i in range(N)], timeout=5)
        print("test_gossip_mtu: OK")
    finally:
        bad = c.stop_all()
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert not bad, bad


if __name__ == "__main__":
    main()
