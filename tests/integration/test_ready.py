#!/usr/bin/python3
"""Readiness on real sluiced processes: /health is liveness, /ready (and
INFO cluster_state / cluster_state_reason, and the sluice_ready gauge) says
whether the node's view of the cluster can be trusted, and why not.

  1. a node running alone on purpose (no --gossip-bind, no --join) is ready;
  2. --join without --gossip-bind: not ready ("alone"), and one warning line
     naming --gossip-bind;
  3. seeds that never answer (nothing listens there, or they hold another
     cluster key): not ready ("alone: no seed has answered"), and one warning
     naming the key file; /health still answers ok;
  4. four nodes: all ready; two killed with SIGKILL: the two survivors say
     "partitioned" (2 of the 4 seen); a third stopped with SIGSTOP: the last
     one says "alone"; SIGCONT and restarts bring every node back to ready;
  5. five nodes; one reloads a key file whose key marked `use` the others
     lack: it still opens their packets but they drop its own, so they
     declare it dead while it sees them alive.  It must say so
     ("unreachable"), not ok; its old key file back, it is ready again.

Every wait is bounded; every process is stopped at the end.
"""
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402

import redis  # noqa: E402

FAST = ["--gossip-probe-interval-ms", "200", "--log-level", "info"]


def get(port, path):
    """(status, body) of GET path."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def state(d):
    with redis.Redis(unix_socket_path=d.path, socket_timeout=5) as r:
        i = r.info("cluster")
    if "cluster_state_reason" not in i:
        raise AssertionError("INFO cluster without cluster_state_reason: %r" % i)
    return i["cluster_state"], str(i["cluster_state_reason"])


def wait_ready(d, port, want_ready, code=None, timeout=30):
    """Waits until /ready and INFO agree on want_ready (and the reason code)."""
    last = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st, body = get(port, "/ready")
        cs, reason = state(d)
        last = (st, body, cs, reason)
        ok = (st == 200) == want_ready and (cs == "ok") == want_ready
        if ok and (code is None or (reason.startswith(code + ":") and code in body)):
            return body.strip()
        time.sleep(0.1)
    raise AssertionError("readiness did not become %s%s: %s" %
                         ("ready" if want_ready else "not ready",
                          "" if code is None else " (%s)" % code, last))


def gauge(port):
    st, body = get(port, "/metrics")
    assert st == 200
    for line in body.splitlines():
        if line.startswith("sluice_ready "):
            return int(float(line.split()[1]))
    raise AssertionError("no sluice_ready in /metrics")


def daemon(tmp, name, *args):
    port = sluicetest.free_tcp_port()
    d = sluicetest.Daemon("--http", "127.0.0.1:%d" % port, *args,
                          socket_path=os.path.join(tmp, name + ".sock"), tmpdir=tmp)
    d.start()
    return d, port


def test_alone_on_purpose(tmp):
    d, port = daemon(tmp, "solo")
    try:
        body = wait_ready(d, port, True)
        assert state(d) == ("ok", "none"), state(d)
        assert gauge(port) == 1
        print("ok: a node running alone on purpose is ready (%r)" % body)
    finally:
        assert d.stop() == 0
        d.close()


def test_join_without_bind(tmp):
    seed = sluicetest.free_udp_ports(1)[0]
    d, port = daemon(tmp, "nobind", "--join", "127.0.0.1:%d" % seed)
    try:
        body = wait_ready(d, port, False, "alone")
        assert get(port, "/health")[0] == 200
        assert gauge(port) == 0
        log = d.logtext()
        assert log.count("without --gossip-bind") == 1, log
        print("ok: --join without --gossip-bind: %r, and the log says: %s" %
              (body, [ln for ln in log.splitlines() if "--gossip-bind" in ln][0][-90:]))
    finally:
        assert d.stop() == 0
        d.close()


def test_seeds_never_answer(tmp):
    key = os.path.join(tmp, "a.key")
    sluicetest.write_cluster_key(key)
    gport, seed = sluicetest.free_udp_ports(2)
    d, port = daemon(tmp, "lonely", "--node-name", "lonely", "--gossip-bind",
                     "127.0.0.1:%d" % gport, "--join", "127.0.0.1:%d" % seed,
                     "--cluster-key-file", key, *FAST)
    try:
        body = wait_ready(d, port, False, "alone")
        assert "no seed has answered" in body, body
        assert get(port, "/health") == (200, "ok\n")
        sluicetest.wait_until(lambda: "no seed has answered" in d.logtext(), timeout=15,
                              what="the warning about seeds that never answer")
        line = [ln for ln in d.logtext().splitlines() if "no seed has answered" in ln][0]
        assert "--cluster-key-file" in line, line
        time.sleep(2)
        assert d.logtext().count("no seed has answered") == 1, "the warning is not rate-limited"
        print("ok: seeds that never answer: %r; warning: %s" % (body, line[-100:]))
    finally:
        assert d.stop() == 0
        d.close()


def test_members_lost(tmp):
    n = 4
    key = os.path.join(tmp, "c.key")
    sluicetest.write_cluster_key(key)
    ports = sluicetest.free_udp_ports(n)
    join = ",".join("127.0.0.1:%d" % p for p in ports)
    nodes = [None] * n
    http = [0] * n

    def start(i):
        nodes[i], http[i] = daemon(tmp, "m%d" % i, "--node-name", "m%d" % i, "--gossip-bind",
                                   "127.0.0.1:%d" % ports[i], "--join", join,
                                   "--cluster-key-file", key, *FAST)
    try:
        for i in range(n):
            start(i)
        for i in range(n):
            wait_ready(nodes[i], http[i], True)
        print("ok: %d clustered nodes are ready" % n)
        for i in (2, 3):
            nodes[i].kill()
        for i in (0, 1):
            body = wait_ready(nodes[i], http[i], False, "partitioned")
            assert "2 of the 4" in body, body
            assert get(http[i], "/health") == (200, "ok\n")
        print("ok: two of four killed: the survivors say %r" % body)
        nodes[1].proc.send_signal(signal.SIGSTOP)
        try:
            body = wait_ready(nodes[0], http[0], False, "alone")
        finally:
            nodes[1].proc.send_signal(signal.SIGCONT)
        print("ok: a third stopped: the last one says %r" % body)
        for i in (2, 3):
            nodes[i].close()
            start(i)
        for i in range(n):
            wait_ready(nodes[i], http[i], True, timeout=40)
        print("ok: SIGCONT and restarts: every node is ready again")
    finally:
        for d in nodes:
            if d is not None and d.proc is not None:
                if d.proc.poll() is None:
                    d.stop()
                d.close()


def test_unheard(tmp):
    n = 5
    key = os.path.join(tmp, "u.key")
    sluicetest.write_cluster_key(key)
    other = os.path.join(tmp, "u2.key")
    sluicetest.write_cluster_key(other)
    with open(key) as f:
        good = f.read()
    with open(other) as f:
        new_hex = f.read().split()[1]
    keys = [os.path.join(tmp, "u%d.key" % i) for i in range(n)]
    for k in keys:
        with open(k, "w") as f:
            f.write(good)
        os.chmod(k, 0o600)
    ports = sluicetest.free_udp_ports(n)
    join = ",".join("127.0.0.1:%d" % p for p in ports)
    nodes, http = [None] * n, [0] * n
    try:
        for i in range(n):
            nodes[i], http[i] = daemon(tmp, "u%d" % i, "--node-name", "u%d" % i, "--gossip-bind",
                                       "127.0.0.1:%d" % ports[i], "--join", join,
                                       "--cluster-key-file", keys[i], "--log-level", "info")
        for i in range(n):
            wait_ready(nodes[i], http[i], True)
        x = n - 1
        # The old key kept (it opens the others' packets), a new one used.
        with open(keys[x], "w") as f:
            f.write(good.replace(" use", "") + "2 %s use\n" % new_hex)
        nodes[x].proc.send_signal(signal.SIGHUP)
        # Default probes (1 s): its probes fail from the first, the others
        # have it dead after some 7 s, and it sees a majority alive or
        # suspect for tens of seconds more (it probes slower and slower).
        body = wait_ready(nodes[x], http[x], False, "unreachable", timeout=40)
        assert get(http[x], "/health") == (200, "ok\n")
        print("ok: a node the others cannot hear says %r" % body)
        with open(keys[x], "w") as f:
            f.write(good)
        nodes[x].proc.send_signal(signal.SIGHUP)
        for i in range(n):
            wait_ready(nodes[i], http[i], True, timeout=40)
        print("ok: its key file back, every node is ready again")
    finally:
        for d in nodes:
            if d is not None and d.proc is not None:
                if d.proc.poll() is None:
                    d.stop()
                d.close()


def main():
    tmp = tempfile.mkdtemp(prefix="sluice-ready-")
    try:
        test_alone_on_purpose(tmp)
        test_join_without_bind(tmp)
        test_seeds_never_answer(tmp)
        test_members_lost(tmp)
        test_unheard(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
