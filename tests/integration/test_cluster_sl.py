#!/usr/bin/python3
"""SL.* commands honour a limit's scope on real clustered sluiced processes.

Three nodes gossip on 127.0.0.1 and load one config file.  Checked:
  1. a global token-bucket policy and a global fixed-window policy are
     shared: what one node used is refused on the others (local scope would
     give every node the full limit);
  2. SL.ACQUIRE on a global key waits for consumption that happened on
     another node to drain, and refuses at once a wait beyond its timeout;
  3. SL.MULTI mixing a global and a local key is all or nothing: a refusal
     of the global key charges neither, an admission charges both (the
     global one cluster-wide, the local one on this node only);
  4. inline limits: SCOPE global is shared, SCOPE local is not, and
     sliding-log cannot be global; SL.REFUND and SL.RESET refuse global keys;
  5. RESP3 (HELLO 3) belongs to the connection that asked for it;
  6. SL.CHARGE on a global key is counted cluster-wide: after a charge on
     one node another node's requests wait (the key's bucket is spent);
  7. a dry-run global policy answers allowed and counts its refusals in
     dry_run_would_limit, as a local one does;
  8. a reload that turns a local policy global carries what its keys used
     as local keys into the cluster: no fresh quota, for a key of 700
     bytes (named by its digest in the cluster) as for a short one.

Every wait is bounded; every process is stopped at the end, even on failure.
"""
import os
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402

import redis  # noqa: E402

N = 3
HOUR = 3600

CONFIG = """
[sluiced]
log_level = info

[policy tb]
algorithm = token-bucket
burst = 9
rate = 10 per 1h
scope = global
match = tb:

[policy fw]
algorithm = fixed-window
rate = 10 per 1h
scope = global
match = fw:

[policy slow]
algorithm = gcra
burst = 0
rate = 1 per 2s
scope = global
match = slow:

[policy gm]
algorithm = gcra
burst = 0
rate = 1 per 1h
scope = global
match = gm:

[policy ch]
algorithm = gcra
burst = 4
rate = 5 per 1h
scope = global
match = ch:

[policy dr]
algorithm = gcra
burst = 0
rate = 1 per 1h
scope = global
dry_run = true
match = dr:

[policy lm]
algorithm = fixed-window
rate = 5 per 1h
scope = local
match = lm:

[policy lg]
algorithm = gcra
burst = 4
rate = 5 per 1h
scope = local
match = lg:
"""


class Nodes:
    def __init__(self, tmp):
        self.tmp = tmp
        self.ports = sluicetest.free_udp_ports(N)
        self.conf = os.path.join(tmp, "sluice.conf")
        with open(self.conf, "w") as f:
            f.write(CONFIG)
        self.nodes = []

    def sock(self, i):
        return os.path.join(self.tmp, "n%d.sock" % i)

    def start(self):
        join = ",".join("127.0.0.1:%d" % p for p in self.ports)
        for i in range(N):
            d = sluicetest.Daemon("--config", self.conf, "--node-name", "node%d" % i,
                                  "--gossip-bind", "127.0.0.1:%d" % self.ports[i],
                                  "--join", join, "--insecure-no-encryption",
                                  "--gossip-probe-interval-ms", "200",
                                  "--max-key-bytes", "2048",
                                  socket_path=self.sock(i), tmpdir=self.tmp)
            self.nodes.append(d)
            d.start()

    def client(self, i):
        return redis.Redis(unix_socket_path=self.sock(i), socket_timeout=10)

    def wait_ready(self, timeout=20.0):
        """Every node sees all others alive and has synced global state."""
        def ready():
            for i in range(N):
                with self.client(i) as r:
                    inf = r.info("cluster")
                if int(inf.get("members_alive", 0)) != N or inf.get("synced") != "yes":
                    return False
            return True
        sluicetest.wait_until(ready, timeout, "every node to see %d alive members and be "
                              "synced" % N, interval=0.1)

    def stop(self):
        bad = []
        for d in self.nodes:
            try:
                st = d.stop()
                if st != 0:
                    bad.append("exit %d:\n%s" % (st, d.logtext()[-3000:]))
            finally:
                d.kill()
                d.log.close()
        return bad


def allowed(rep):
    return rep[0] == 0


SETTLE_S = 10.0  # bound on a report or lease round trip (interval: 100 ms)


def key_info(c, i, key):
    """SL.KEY on node i as a dict ({node name: units} under "slots"), or
    None when node i holds the key neither as a node nor as its owner."""
    with c.client(i) as r:
        rep = r.execute_command("SL.KEY", key)
    if rep is None:
        return None
    d = {}
    for k, v in zip(rep[0::2], rep[1::2]):
        d[k.decode()] = v.decode() if isinstance(v, bytes) else v
    d["slots"] = {row[0].decode(): int(row[2]) for row in d["slots"]}
    return d


def owner_of(c, key, holder):
    """The index of key's owner as node `holder` sees it, or None."""
    info = key_info(c, holder, key)
    if info is None or not info["owner"].startswith("node"):
        return None
    return int(info["owner"][4:])


def owner_slots(c, key, holder):
    """{node name: units admitted} as the key's owner knows them ({} if
    the owner holds no record yet)."""
    o = owner_of(c, key, holder)
    info = key_info(c, o, key) if o is not None else None
    return info["slots"] if info is not None and info.get("owned") == "yes" else {}


def wait_owner_knows(c, key, counts, holder):
    """Waits until key's owner has reports saying node n admitted at least
    counts[n] units, for every n: what another node is refused depends on
    it.  (This used to be a 0.8 s sleep.)"""
    want = {"node%d" % n: cnt for n, cnt in counts.items()}
    sluicetest.wait_until(
        lambda: all(owner_slots(c, key, holder).get(n, -1) >= cnt for n, cnt in want.items()),
        SETTLE_S, "the owner of %s to hear that %s" % (
            key, ", ".join("%s admitted %d" % kv for kv in sorted(want.items()))))


def wait_lease_after(c, i, key, since):
    """Waits until node i has a lease of key that came after `since`
    (time.monotonic()): what an owner knew at `since` reaches node i with
    its next lease, and until then node i may admit on the spare of the
    lease before (SL.KEY's lease_age_ms)."""
    def fresh():
        info = key_info(c, i, key)
        age = int(info["lease_age_ms"]) if info is not None else -1
        return age >= 0 and age / 1000.0 < time.monotonic() - since
    sluicetest.wait_until(fresh, SETTLE_S, "node %d to get a lease of %s" % (i, key), interval=0.05)


def lease_entries(c):
    out = []
    for i in range(N):
        with c.client(i) as r:
            out.append(int(r.info("cluster")["lease_entries_received"]))
    return out


def away_from_hour_boundary():
    """Fixed windows of 1 h start on the hour: keep a test inside one."""
    left = HOUR - time.time() % HOUR
    if left < 40:
        time.sleep(left + 1)


def shared_policy(c, prefix, limit):
    """Node 0, alone on the key, gets the whole limit; nodes 1 and 2 then
    get at most their first-touch part."""
    key = prefix + "shared"
    with c.client(0) as r:
        # Its first touch gets 1/3 of the burst at once, the owner's first
        # answer the rest (within a lease round); then nothing more.
        got0 = 0
        deadline = time.monotonic() + 5
        while got0 < limit and time.monotonic() < deadline:
            got0 += allowed(r.execute_command("SL.THROTTLE", key))
            time.sleep(0.05)
        for _ in range(4):
            got0 += allowed(r.execute_command("SL.THROTTLE", key))
    wait_owner_knows(c, key, {0: got0}, holder=0)
    others = 0
    for i in (1, 2):
        with c.client(i) as r:
            for _ in range(3):
                others += allowed(r.execute_command("SL.THROTTLE", key))
            peek = r.execute_command("SL.PEEK", key)
            assert peek[2] == 0, "node %d still sees %d remaining" % (i, peek[2])
    print("%s: node0 admitted %d of limit %d, nodes 1-2 then admitted %d" %
          (prefix, got0, limit, others))
    assert got0 == limit, "node0 admitted %d, want the whole limit %d" % (got0, limit)
    # A node's first request for a key it has never served is decided at
    # once, with its 1/N of the burst (3 nodes: limit // 3 + 1 at most),
    # before the key's owner has told it the key is spent.
    first_touch = limit // 3 + 1
    assert others <= 2 * first_touch, "other nodes admitted %d after the limit was used" % others


def test_shared_policies(c):
    shared_policy(c, "tb:", 10)
    away_from_hour_boundary()
    shared_policy(c, "fw:", 10)
    print("ok: global token-bucket and fixed-window policies are shared")


def test_acquire_global(c):
    # 1 unit per 2 s: node 1 takes it, node 0 must wait for it to drain.
    with c.client(1) as r:
        assert allowed(r.execute_command("SL.THROTTLE", "slow:a"))
    t_taken = time.monotonic()
    wait_owner_knows(c, "slow:a", {1: 1}, holder=1)
    with c.client(0) as r:
        rep = r.execute_command("SL.ACQUIRE", "slow:a", "TIMEOUT", "100")
        if rep[0] == 0:
            # Node 0 had never heard of the key: its first request is
            # decided on the cluster's credit (availability first, README
            # "The bound"); from then on it knows the key is spent.
            print("node 0's first touch was admitted on credit: %s" % rep)
            rep = r.execute_command("SL.ACQUIRE", "slow:a", "TIMEOUT", "100")
        assert rep[0] == 1, "a wait beyond the timeout was not refused at once: %s" % rep
        assert rep[3] > 100, rep
        rep = r.execute_command("SL.ACQUIRE", "slow:a", "TIMEOUT", "5000")
        done = time.monotonic()
    print("SL.ACQUIRE on a global key: %s (waited %d ms, %.2f s after node1 took the unit)" %
          (rep, rep[5], done - t_taken))
    assert rep[0] == 0, rep
    assert rep[5] >= 500, "did not wait for the other node's consumption: %s" % rep
    assert done - t_taken >= 1.8, "admitted %.2f s after the other node's unit" % (done - t_taken)
    print("ok: SL.ACQUIRE waits for consumption made on another node")


def until_allowed(r, *cmd, timeout=3.0):
    """Repeats cmd until it is allowed (a key a node alone uses gets its
    whole burst from the key's owner within a lease round); the reply."""
    deadline = time.monotonic() + timeout
    while True:
        rep = r.execute_command(*cmd)
        if rep[0] == 0 or time.monotonic() > deadline:
            return rep
        time.sleep(0.05)


def hold(c, *keys_and_spec):
    """Every node holds the key (a PEEK) and gets its lease: a node's first
    request for a key it never held is decided with its first-touch part of
    the burst, before the key's owner has answered.  Waits until the owner
    has a report from every node and every other node has had a lease
    entry since its PEEK (the owner applies its own lease when it sends
    the others theirs)."""
    key = keys_and_spec[0]
    before = lease_entries(c)
    for i in range(N):
        with c.client(i) as r:
            r.execute_command("SL.PEEK", *keys_and_spec)

    def leased():
        o = owner_of(c, key, 0)
        if o is None or len(owner_slots(c, key, 0)) < N:
            return False
        now = lease_entries(c)
        return all(now[i] > before[i] for i in range(N) if i != o)
    sluicetest.wait_until(leased, SETTLE_S, "every node to report %s to its owner and "
                          "get a lease for it" % key, interval=0.05)


def test_multi_mixed(c):
    away_from_hour_boundary()
    hold(c, "gm:1")
    hold(c, "gm:2")
    with c.client(1) as r:
        assert allowed(until_allowed(r, "SL.THROTTLE", "gm:1"))
    wait_owner_knows(c, "gm:1", {1: 1}, holder=1)
    wait_lease_after(c, 0, "gm:1", time.monotonic())
    with c.client(0) as r:
        assert r.execute_command("SL.PEEK", "gm:1")[2] == 0
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 5
        rep = r.execute_command("SL.MULTI", "KEY", "gm:1", "KEY", "lm:1")
        assert rep[0] == 1 and rep[1][0] == 1 and rep[2][0] == 0, rep
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 5, "refused SL.MULTI charged a key"
        # Each refused try leaves lm:1 as it was: the global key is charged
        # first (its peek's remaining is the cluster's level, and the charge
        # is decided on node 0's part of it, which can be refused after the
        # peek fit; charged after lm:1, such tries spent lm:1's window).
        rep = until_allowed(r, "SL.MULTI", "KEY", "gm:2", "KEY", "lm:1")
        assert rep[0] == 0, rep
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 4
    wait_owner_knows(c, "gm:2", {0: 1}, holder=0)
    wait_lease_after(c, 2, "gm:2", time.monotonic())
    with c.client(2) as r:
        assert r.execute_command("SL.PEEK", "gm:2")[2] == 0
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 5, "local key charged elsewhere"
        assert not allowed(r.execute_command("SL.THROTTLE", "gm:2"))
    print("ok: SL.MULTI over a global and a local key is all or nothing")


def test_inline_scope_and_errors(c):
    spec = ["ALGO", "gcra", "RATE", "1", "3600000"]
    hold(c, "inl:g", *spec, "SCOPE", "global")
    for scope, key in (("global", "inl:g"), ("local", "inl:l")):
        with c.client(0) as r:
            assert allowed(until_allowed(r, "SL.THROTTLE", key, *spec, "SCOPE", scope))
    wait_owner_knows(c, "inl:g", {0: 1}, holder=0)
    with c.client(1) as r:
        # remaining is the cluster's: node 1 learns the unit is spent with
        # its owner's next lease (until then it may admit on credit)
        sluicetest.wait_until(
            lambda: r.execute_command("SL.PEEK", "inl:g", *spec, "SCOPE", "global")[2] == 0,
            timeout=5, what="node 1 to see the cluster's remaining")
        g = r.execute_command("SL.THROTTLE", "inl:g", *spec, "SCOPE", "global")
        loc = r.execute_command("SL.THROTTLE", "inl:l", *spec, "SCOPE", "local")
        assert not allowed(g), "SCOPE global was not shared: %s" % g
        assert allowed(loc), "SCOPE local was shared: %s" % loc
        # without SCOPE an inline limit takes the default scope: global when clustered
        assert not allowed(r.execute_command("SL.THROTTLE", "inl:g", *spec))
        for cmd, want in (
                (["SL.THROTTLE", "x", "ALGO", "sliding-log", "RATE", "1", "1000", "SCOPE",
                  "global"], "cannot be global"),
                (["SL.THROTTLE", "tb:x", "SCOPE", "local"], "SCOPE needs ALGO"),
                (["SL.THROTTLE", "x", *spec, "SCOPE", "everywhere"], "local or global"),
                (["SL.REFUND", "tb:shared", "QTY", "1"], "global key"),
                (["SL.RESET", "tb:shared"], "global key")):
            try:
                r.execute_command(*cmd)
                raise AssertionError("%s was not refused" % cmd)
            except redis.ResponseError as e:
                assert want in str(e), (cmd, str(e))
        assert r.execute_command("SL.RESET", "inl:l") == 1
    print("ok: inline SCOPE, and SL.REFUND / SL.RESET refuse global keys")


def test_resp3_per_connection(c):
    a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for s in (a, b):
            s.settimeout(10)
            s.connect(c.sock(0))
        a.sendall(sluicetest.resp_command("HELLO", "3"))
        sluicetest.recv_until(a, b"modules\r\n*0\r\n")
        a.sendall(sluicetest.resp_command("SL.PEEK", "lm:9"))
        b.sendall(sluicetest.resp_command("SL.PEEK", "lm:9"))
        ra = sluicetest.recv_until(a, b"$2\r\nlm\r\n")
        rb = sluicetest.recv_until(b, b"\r\n", limit=1)
        assert ra.startswith(b"%7\r\n"), ra
        assert rb.startswith(b"*5\r\n"), rb
    finally:
        a.close()
        b.close()
    # a new connection starts with RESP2 again
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(10)
        s.connect(c.sock(0))
        s.sendall(sluicetest.resp_command("SL.PEEK", "lm:9"))
        assert sluicetest.recv_until(s, b"\r\n", limit=1).startswith(b"*5\r\n")
    finally:
        s.close()
    print("ok: RESP3 stays with the connection that asked for it")


def test_global_charge(c):
    key = "ch:1"
    hold(c, key)
    with c.client(0) as r:
        # A post-paid charge of the whole limit (5) on node 0.
        rep = until_allowed(r, "SL.CHARGE", key, "QTY", 5)
        assert rep[0] == 0, "the charge was not counted: %s" % rep
    wait_owner_knows(c, key, {0: 5}, holder=0)
    with c.client(1) as r:
        # Node 1's next lease carries the cluster's level: nothing left.
        sluicetest.wait_until(lambda: r.execute_command("SL.PEEK", key)[2] == 0, SETTLE_S,
                              "node 1 to see the charge made on node 0", interval=0.05)
        reps = []
        for _ in range(10):
            reps.append(r.execute_command("SL.THROTTLE", key))
            time.sleep(0.2)
    admitted = sum(allowed(rep) for rep in reps)
    print("after a charge of 5 on node 0, node 1 admitted %d of 10 over 2 s: %s"
          % (admitted, [rep[:4] for rep in reps]))
    # Without the charge the key's 5 units were there to take.  With it,
    # node 1 admits at most what its own bucket held (the bound's per-node
    # term), then waits: 5 per hour, one unit every 12 minutes.
    assert admitted <= 1, reps
    assert all(rep[0] == 1 for rep in reps[-5:]), reps
    print("ok: a charge on a global key is seen by the other nodes")


def test_global_dry_run_counted(c):
    def would_limit(i):
        with c.client(i) as r:
            return int(r.info("limiter")["dry_run_would_limit"])
    before = would_limit(2)
    with c.client(2) as r:
        reps = [r.execute_command("SL.THROTTLE", "dr:1") for _ in range(4)]
    assert all(rep[0] == 0 for rep in reps), reps  # dry run: always allowed
    after = would_limit(2)
    # 1 per hour, burst 0: at least the last three were refusals.
    assert after - before >= 3, (before, after)
    print("ok: a dry-run global policy's refusals are counted (%d)" % (after - before))


def test_reload_local_to_global(c):
    # A short key, and one over 512 bytes, which the cluster names by its
    # digest (cluster_key_id): its carry still finds what it used.
    keys = ["lg:1", "lg:" + "x" * 700]
    used = {}
    for key in keys:
        with c.client(0) as r:
            # The whole limit (burst 4: 5 at once, 5 an hour), used as a local key.
            used[key] = sum(allowed(r.execute_command("SL.THROTTLE", key)) for _ in range(7))
        assert used[key] == 5, used
    with open(c.conf) as f:
        text = f.read()
    with open(c.conf, "w") as f:
        f.write(text.replace("scope = local\nmatch = lg:", "scope = global\nmatch = lg:"))
    for i in range(N):
        with c.client(i) as r:
            r.execute_command("SL.RELOAD")
    for key in keys:
        with c.client(0) as r:
            reps = []
            for _ in range(10):
                reps.append(r.execute_command("SL.THROTTLE", key))
                time.sleep(0.1)
        after0 = sum(allowed(rep) for rep in reps)
        # A fresh quota would admit the whole limit again on node 0 (its
        # first touch, then the owner's grants); carried, the key is spent.
        assert after0 == 0, "node 0 admitted %d of %d-byte key after the reload: %s" % (
            after0, len(key), reps)
        wait_owner_knows(c, key, {0: 5}, holder=0)
        others = 0
        for i in (1, 2):
            with c.client(i) as r:
                others += sum(allowed(r.execute_command("SL.THROTTLE", key)) for _ in range(3))
        print("local to global, %d-byte key: node 0 used %d as a local key, then admitted %d of "
              "10 as a global one; nodes 1-2 admitted %d" % (len(key), used[key], after0, others))
        # The others admit at most their first-touch part of the burst (1/3
        # of 5 plus a fraction, each), as after any use on another node.
        assert others <= 2 * (5 // 3 + 1), others
    print("ok: a reload from local to global scope carries the keys' use, long keys' too")


def main():
    tmp = tempfile.mkdtemp(prefix="sluice-clsl-")
    c = Nodes(tmp)
    failed = True
    bad = []
    try:
        c.start()
        c.wait_ready()
        test_shared_policies(c)
        test_acquire_global(c)
        test_multi_mixed(c)
        test_inline_scope_and_errors(c)
        test_resp3_per_connection(c)
        test_global_charge(c)
        test_global_dry_run_counted(c)
        test_reload_local_to_global(c)
        failed = False
    finally:
        bad = c.stop()
        if failed:
            for i, d in enumerate(c.nodes):
                print("---- log of node%d ----\n%s" % (i, d.logtext()[-3000:]))
        shutil.rmtree(tmp, ignore_errors=True)
    if bad:
        print("nodes exited badly:\n" + "\n".join(bad))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
