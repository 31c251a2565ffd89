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
  5. RESP3 (HELLO 3) belongs to the connection that asked for it.

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

[policy lm]
algorithm = fixed-window
rate = 5 per 1h
scope = local
match = lm:
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
                                  socket_path=self.sock(i), tmpdir=self.tmp)
            self.nodes.append(d)
            d.start()

    def client(self, i):
        return redis.Redis(unix_socket_path=self.sock(i), socket_timeout=10)

    def wait_ready(self, timeout=20.0):
        """Every node sees all others alive and has synced global state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = True
            for i in range(N):
                with self.client(i) as r:
                    inf = r.info("cluster")
                if int(inf.get("members_alive", 0)) != N or inf.get("synced") != "yes":
                    ok = False
            if ok:
                return
            time.sleep(0.1)
        raise AssertionError("the cluster did not converge")

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


def gossip_settle():
    time.sleep(0.8)  # several gossip intervals (100 ms)


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
    gossip_settle()
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
    gossip_settle()
    with c.client(0) as r:
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
    the burst, before the key's owner has answered."""
    for i in range(3):
        with c.client(i) as r:
            r.execute_command("SL.PEEK", *keys_and_spec)
    gossip_settle()


def test_multi_mixed(c):
    away_from_hour_boundary()
    hold(c, "gm:1")
    hold(c, "gm:2")
    with c.client(1) as r:
        assert allowed(until_allowed(r, "SL.THROTTLE", "gm:1"))
    gossip_settle()
    with c.client(0) as r:
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 5
        rep = r.execute_command("SL.MULTI", "KEY", "gm:1", "KEY", "lm:1")
        assert rep[0] == 1 and rep[1][0] == 1 and rep[2][0] == 0, rep
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 5, "refused SL.MULTI charged a key"
        rep = until_allowed(r, "SL.MULTI", "KEY", "gm:2", "KEY", "lm:1")
        assert rep[0] == 0, rep
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 4
    gossip_settle()
    with c.client(2) as r:
        assert r.execute_command("SL.PEEK", "gm:2")[2] == 0, "global key not charged"
        assert r.execute_command("SL.PEEK", "lm:1")[2] == 5, "local key charged elsewhere"
        assert not allowed(r.execute_command("SL.THROTTLE", "gm:2"))
    print("ok: SL.MULTI over a global and a local key is all or nothing")


def test_inline_scope_and_errors(c):
    spec = ["ALGO", "gcra", "RATE", "1", "3600000"]
    hold(c, "inl:g", *spec, "SCOPE", "global")
    for scope, key in (("global", "inl:g"), ("local", "inl:l")):
        with c.client(0) as r:
            assert allowed(until_allowed(r, "SL.THROTTLE", key, *spec, "SCOPE", scope))
    gossip_settle()
    with c.client(1) as r:
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
