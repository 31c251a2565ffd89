#!/usr/bin/python3
"""Cluster benchmark on real sluiced processes (driven by tests/bench/cluster.sh).

For each cluster size N: N nodes on 127.0.0.1 share one global key (burst 10,
50 per second); one client per node sends CL.THROTTLE at a skewed rate
(node i: 40 * (i + 1) requests/s, so the cluster asks for 5x-12x the limit).
During the run:
  - at 30% of it, the last node is frozen with SIGSTOP for 5 s: it neither
    serves nor gossips, which is what its peers see of a partition (no
    firewall rules needed, so the run needs no privileges);
  - at 60%, node 2 is killed with SIGKILL and restarted 2 s later.
Printed per N: admitted / a central GCRA replaying the same answered
requests (the oracle), over the whole run and over the steady first part;
gossip bytes sent per node per second and bytes per key delta (from INFO);
failed requests on nodes that were neither frozen nor killed (should be 0).
Writes DIR/cluster-nN.dat (time bin, total and per-node admitted rate) and
DIR/cluster-nN.events for tests/bench/cluster.gp.
"""
import os
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import test_cluster as tc  # noqa: E402

BIN_S = 0.5  # plot resolution


def gossip_counters(c, i):
    inf = tc.info(c, i)
    return (int(inf.get("gossip_bytes_sent", 0)), int(inf.get("delta_bytes_sent", 0)),
            int(inf.get("delta_entries_sent", 0)))


def run(n, duration, outdir):
    tmp = tempfile.mkdtemp(prefix="sluice-bench-")
    c = tc.Cluster(n, tmp)
    try:
        c.start_all()
        c.wait_members([c.name(i) for i in range(n)])
        frozen, victim = n - 1, 1
        t_stop, t_kill = 0.3 * duration, 0.6 * duration
        events_at = {}
        load = tc.Load(c, "bench", duration, rps=[40 * (i + 1) for i in range(n)])

        def freeze():
            load.down[frozen] = True
            c.nodes[frozen].proc.send_signal(signal.SIGSTOP)
            events_at["SIGSTOP node%d" % (frozen + 1)] = time.monotonic() - load.t0

        def thaw():
            c.nodes[frozen].proc.send_signal(signal.SIGCONT)
            load.down[frozen] = False
            events_at["SIGCONT"] = time.monotonic() - load.t0

        def kill():
            load.down[victim] = True
            c.kill9(victim)
            events_at["kill -9 node%d" % (victim + 1)] = time.monotonic() - load.t0

        def restart():
            c.nodes[victim].log.close()
            c.start(victim)
            load.down[victim] = False
            events_at["restart"] = time.monotonic() - load.t0

        keep = [i for i in range(n) if i not in (frozen, victim)]
        before = {i: gossip_counters(c, i) for i in keep}
        t_before = time.monotonic()
        load.run(events=[(t_stop, freeze), (t_stop + 5.0, thaw), (t_kill, kill),
                         (t_kill + 2.0, restart)])
        elapsed = time.monotonic() - t_before
        after = {i: gossip_counters(c, i) for i in keep}

        ans = load.answers
        got, ref = tc.admitted(ans), tc.oracle(ans)
        steady = [a for a in ans if a[0] < t_stop]
        sgot, sref = tc.admitted(steady), tc.oracle(steady)
        bad = [e for e in load.errors if not e[3] and e[1] in keep]
        bps = [(after[i][0] - before[i][0]) / elapsed for i in keep]
        dbytes = sum(after[i][1] - before[i][1] for i in keep)
        dentries = sum(after[i][2] - before[i][2] for i in keep)
        print("N=%d: %d requests in %.0f s; admitted %d, oracle %d, ratio %.3f; steady part "
              "(first %.0f s): %d / %d = %.3f" % (n, len(ans), duration, got, ref, got / ref,
                                                  t_stop, sgot, sref, sgot / sref))
        print("N=%d: gossip bytes sent per node per second %.0f (min %.0f, max %.0f); "
              "%.1f bytes per key delta; failed requests on untouched nodes: %d"
              % (n, sum(bps) / len(bps), min(bps), max(bps),
                 dbytes / dentries if dentries else 0.0, len(bad)))

        nb = int(duration / BIN_S) + 1
        per = [[0] * n for _ in range(nb)]
        ref_bins = [0] * nb
        for t, i, _life, ok in ans:
            if ok:
                per[min(int(t / BIN_S), nb - 1)][i] += 1
        # The oracle's admissions over time, for the picture.
        emission, cap, tat = 1.0 / tc.RATE, (tc.BURST + 1) / tc.RATE, None
        for t, *_ in ans:
            tat = t if tat is None or tat < t else tat
            if tat + emission - t <= cap + 1e-9:
                tat += emission
                ref_bins[min(int(t / BIN_S), nb - 1)] += 1
        with open(os.path.join(outdir, "cluster-n%d.dat" % n), "w") as f:
            f.write("# t total oracle limit " + " ".join(c.name(i) for i in range(n)) + "\n")
            for b in range(nb - 1):
                f.write("%.2f %.1f %.1f %d %s\n" % (
                    (b + 0.5) * BIN_S, sum(per[b]) / BIN_S, ref_bins[b] / BIN_S, tc.RATE,
                    " ".join("%.1f" % (x / BIN_S) for x in per[b])))
        with open(os.path.join(outdir, "cluster-n%d.events" % n), "w") as f:
            for name, t in sorted(events_at.items(), key=lambda e: e[1]):
                f.write("%.2f %s\n" % (t, name.replace(" ", "_")))
        return got / ref
    finally:
        bad = c.stop_all()
        if bad:
            print("nodes exited badly:\n" + "\n".join(bad))
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    duration = float(os.environ.get("CLUSTER_BENCH_SECONDS", "30"))
    sizes = [int(x) for x in os.environ.get("CLUSTER_BENCH_SIZES", "3 5").split()]
    os.makedirs(outdir, exist_ok=True)
    for n in sizes:
        run(n, duration, outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
