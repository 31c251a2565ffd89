#!/usr/bin/python3
"""Soak: clustered sluiced nodes under mixed load and disturbances.

    /usr/bin/python3 tests/soak/soak.py --bin BUILD/bin [--seconds 600]
        [--nodes N] [--netns [yes|no|auto]]

A soak finds what short tests miss: slow leaks, keys that are never
reclaimed, a daemon that dies on the thousandth odd request or reload, a
membership view that splits or declares a healthy node dead.  It runs for a
bounded time (--seconds of load, then at most RECLAIM_WAIT_S of watching
keys drain) and a bounded number of requests, only on 127.0.0.1 or in
network namespaces it creates and deletes.

What runs:
  - N nodes (--nodes, default 3) joined by gossip (short intervals), each
    with --metrics, and a config with global gcra policies ("sg:", and "hot"
    for the oracle key), a global token bucket, a local sliding window, a
    local sliding log and a dry-run policy; inline CL.THROTTLE keys are
    local (--default-scope).  Every node is a seed (--join lists them all).
    With --netns (root) each node lives in a network namespace of its own,
    its veth on a bridge in a hub namespace, gossiping on NET.i:7946;
  - per node: one client hammering the global key "hot" at HOT_RPS (its
    answers are compared with one central GCRA, the oracle), one mixed
    client (CL.THROTTLE on thousands of random keys, SL.THROTTLE on every
    policy, SL.MULTI, SL.ACQUIRE with short timeouts, pipelined batches) and
    one rude client (malformed frames, oversize keys, connections dropped
    mid-command or mid-wait);
  - one disturbance every few seconds, in turn: SIGHUP with a good config,
    SIGSTOP/SIGCONT of a node for 2 s, SIGHUP with a bad config (must be
    refused and the old one kept), kill -9 and restart of a node, a second
    process started as node2 (must exit 1 and leave node2 alive in every
    view), a node with another cluster key (must say cluster_state
    not_ready and never become a member), and with --netns a partition of
    the last two nodes from the others for PART_S (after it heals every
    node must see every other alive within 30 s).  Freezes and kills rotate
    over node2..nodeN, so every seed but node1 is restarted; node1 is never
    frozen or killed, so its whole life is the leak probe.

What it asserts (and prints):
  - no daemon died unless this script killed it, and every one still alive
    at the end exits 0 on SIGTERM (under the sanitizers: no leak, no error);
  - every well-formed request to a node that was up and not frozen during
    the request got a reply, and no such reply was an error;
  - malformed input got an error reply or a closed connection, never a hang;
  - RSS after warm-up stays bounded: the last sample under load is at most
    1.5x the first sample after warm-up plus 8 MB.  Warm-up ends when the
    random key spaces have been visited and every key's life (a second for
    local keys, a 6.4 s history for global ones) has turned over, so the
    table and allocator have reached their working size; from then on the
    load is stationary and memory should be flat.  The slack covers the
    random variation of the live key count and allocator fragmentation; a
    leak of even 50 bytes per request (about 500 requests/s per node)
    exceeds it within a few minutes.  In a 20 s run the bound is weak;
    the long run is the leak check;
  - local keys fall back once the load stops (reclaim works): to at most
    5% of the peak, plus a few, within RECLAIM_WAIT_S.  Global keys are
    kept 30 s after their last change for lagging peers; how many are left
    at the end is printed, not asserted (some outlive the grace after
    restarts and freezes);
  - membership: every sample, each node that has been up, unfrozen and
    unpartitioned for GRACE_S reads its SL.MEMBERS and INFO cluster; any
    other such node it sees dead, left or not at all (a split, a false
    death) fails the run, as does cluster_state other than ok while the
    whole cluster is quiet; suspect entries are counted and printed; and
    every death a daemon logged is sorted: of a member frozen or killed in
    the 5 s before or across a partition (the detector's job), else a
    false death, printed and not judged: with the soak's 200 ms probes a
    daemon starved of CPU for a second on a loaded machine is declared
    dead by its peers as a stopped one would be;
  - the worst WINDOW_S of admissions of "hot" against what the limit
    allows in that time (burst + 1 + rate x WINDOW_S) stays within 1.25x
    outside partitions (inside one, each side admits the whole limit:
    printed, not judged);
  - admitted/oracle for "hot" stays within +-15% (outside partitions).
    Freezes make the others hold back the frozen node's share (ratio below
    1) and restarts add noise, so the bound is loose; steady state is
    within 2% (tests/bench/cluster.sh).
"""
import argparse
import calendar
import os
import re
import random
import shutil
import signal
import subprocess
import socket
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import sluicetest  # noqa: E402

HOT_BURST, HOT_RATE = 10, 50  # "hot": burst 10, 50 per second, global
HOT_RPS = 50  # per node: 3x the limit in total
KEYSPACE = 20000  # local random keys: far more than live at once
GLOBAL_KEYSPACE = 1000  # global random keys (each costs every node a history)
REQ_TIMEOUT = 5.0  # a reply later than this counts as missing
FREEZE_S = 2.0  # past the 1 s a stall survives with 200 ms probes: a death, then a refutation
RECLAIM_WAIT_S = 40.0  # global keys are kept 30 s after their last change
RSS_SLACK_KB = 8 * 1024
N = 3  # nodes; --nodes
GRACE_S = 15.0  # a node's view of a peer is judged this long after either changed
PART_S = 10.0  # a partition lasts this long (--netns)
WINDOW_S = 10.0  # the global key's admissions are judged over windows this long
NET = "10.78.0"  # --netns: node i is NET.i, gossip port 7946

GOOD_CONFIG = """\
[policy hot]
algorithm = gcra
burst = %d
rate = %d per 1s
scope = global
match = hot

[policy sg]
algorithm = gcra
burst = 5
rate = %%d per 1s
scope = global
match = sg:

[policy tb]
algorithm = token-bucket
burst = 5
rate = 20 per 1s
scope = global
match = tb:

[policy sw]
algorithm = sliding-window
rate = 50 per 1s
precision = 10
scope = local
match = sw:

[policy sl]
algorithm = sliding-log
rate = 10 per 1s
scope = local
match = sl:

[policy dry]
algorithm = gcra
burst = 2
rate = 5 per 1s
scope = local
dry_run = true
match = dry:
""" % (HOT_BURST, HOT_RATE)

BAD_CONFIG = GOOD_CONFIG % 20 + """
[policy broken]
algorithm = no-such-algorithm
rate = 1 per 1s
"""


def log(msg):
    print(msg, flush=True)


# ---- RESP over a raw socket (pipelines and malformed frames need it) ----

class Closed(Exception):
    pass


class Err:
    def __init__(self, text):
        self.text = text


class Conn:
    """A blocking RESP connection with a timeout."""

    def __init__(self, path, timeout=REQ_TIMEOUT):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        try:
            self.s.connect(path)
        except OSError:
            self.s.close()
            raise
        self.buf = b""

    def close(self):
        self.s.close()

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise Closed()
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def reply(self):
        """One reply: int, bytes, list, None or an Err."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return Err(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise Closed()  # not RESP2: a broken stream

    def call(self, *args):
        self.send(sluicetest.resp_command(*args))
        return self.reply()


# ---- the cluster ----

class Node:
    def __init__(self, i, tmp, ports, keyfile, config, mport, ns=None):
        self.i = i
        self.name = "node%d" % (i + 1)
        self.sock = os.path.join(tmp, "n%d.sock" % (i + 1))
        self.mport = mport
        self.ns = ns  # network namespace (--netns), or None for 127.0.0.1
        if ns:
            self.host = "%s.%d" % (NET, i + 1)
            join = ",".join("%s.%d:7946" % (NET, j + 1) for j in range(len(ports)))
            gbind = "%s:7946" % self.host
        else:
            self.host = "127.0.0.1"
            join = ",".join("127.0.0.1:%d" % p for p in ports)
            gbind = "127.0.0.1:%d" % ports[i]
        self.args = ["--node-name", self.name, "--gossip-bind", gbind,
                     "--join", join, "--cluster-key-file", keyfile, "--config", config,
                     "--metrics", "127.0.0.1:%d" % mport, "--gossip-interval-ms", "100",
                     "--gossip-probe-interval-ms", "200", "--default-scope", "local",
                     "--log-level", "warn"]
        self.tmp = tmp
        self.d = None
        self.state = "down"  # up | frozen | down
        self.gen = 0  # bumped at every change of state: excuses requests across it
        self.lives = 0
        self.rss = []  # (t, life, kB)
        self.changed = 0.0  # soak time of the last change of state

    def prefix(self):
        return ["ip", "netns", "exec", self.ns] if self.ns else []

    def start(self):
        if self.d is not None:
            self.d.log.close()
        self.lives += 1
        # `ip netns exec` execs the daemon in its own process: pid() and
        # signals reach sluiced itself.
        self.d = sluicetest.Daemon(*self.args, socket_path=self.sock, tmpdir=self.tmp,
                                   prefix=self.prefix())
        self.d.logpath = os.path.join(self.tmp, "%s-life%d.log" % (self.name, self.lives))
        self.d.start()
        self.gen += 1
        self.state = "up"
        self.changed = time.monotonic()

    def pid(self):
        return self.d.proc.pid




rss_kb = sluicetest.rss_kb


def node_keys(path):
    """Keys held: local (INFO limiter) plus global (INFO cluster)."""
    c = Conn(path, timeout=2.0)
    try:
        text = c.call("INFO", "limiter", "cluster")
    finally:
        c.close()
    f = {}
    if isinstance(text, bytes):
        for line in text.decode().splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                f[k] = v
    return int(f.get("keys", 0)), int(f.get("global_keys", 0))


# ---- the run ----

class Soak:
    def __init__(self, seconds, seed, tmp, netns=False):
        self.seconds = seconds
        self.seed = seed
        self.tmp = tmp
        self.netns = netns
        self.lan = None  # --netns: the namespaces (deleted by teardown)
        self.partitions = []  # (start, healed) soak times
        self.parted = False
        self.split_obs = []  # (t, viewer, subject, state) in a quiet time: failures
        self.suspect_obs = []  # (t, viewer, subject) suspect in a quiet time: printed
        self.views = 0  # membership views judged
        self.not_ready = []  # (t, node, cluster_state) in a quiet time
        self.down = {}  # node name -> [(from, to)] soak times it was frozen or killed
        self.wall0 = time.time()
        self.lock = threading.Lock()
        self.stop = False
        self.max_requests = int(seconds * 20000)
        self.requests = 0
        self.ok = 0
        self.excused = {}  # missing replies while a node was frozen/down, by kind
        self.missing = []  # missing replies from a node that was up: failures
        self.errors = {}  # error replies to well-formed requests, by kind
        self.rude = {}  # outcomes of malformed/abrupt input
        self.hot = []  # (t, node, allowed)
        self.metrics_fail = 0
        self.keys = []  # (t, total keys)
        self.events = []
        self.unexpected_deaths = []
        self.side_fail = []  # duplicate-name and wrong-key starts that went wrong
        self.reclaim = None
        self.keys_after = 0
        self.keys_split = []
        self.global_after = 0
        self.peak_keys = 0
        self.load_end = 0.0
        self.t0 = time.monotonic()
        keyfile = os.path.join(tmp, "cluster.key")
        sluicetest.write_cluster_key(keyfile)
        self.config = os.path.join(tmp, "soak.conf")
        self.write_config(True)
        ports = sluicetest.free_udp_ports(N)
        if netns:
            self.lan = sluicetest.Lan(N, NET, "soak%d" % os.getpid())
        self.nodes = [Node(i, tmp, ports, keyfile, self.config, sluicetest.free_tcp_port(),
                           ns=self.lan.ns(i) if netns else None)
                      for i in range(N)]

    # ---- network namespaces (--netns): node i in its own, all on one bridge ----

    def del_netns(self):
        if self.lan is not None:
            self.lan.close()

    def partition(self):
        """The last two nodes cut off from the others for PART_S seconds."""
        cut = self.nodes[N - 2:]
        t = self.now()
        self.parted = True
        self.lan.cut([nd.i for nd in cut])
        time.sleep(PART_S)
        self.lan.heal()
        self.parted = False
        self.partitions.append((t, self.now()))
        bad = self.members_alive(timeout=30.0)
        if bad:
            self.side_fail.append("%.0f s after a partition healed: %s" % (30.0, bad))
        return "partition %s | %s for %.0f s, healed, all alive in every view: %s" % (
            ",".join(nd.name for nd in self.nodes[:N - 2]), ",".join(nd.name for nd in cut),
            PART_S, "yes" if not bad else "NO")

    def false_deaths(self):
        """Deaths the daemons logged ("member X (...) is dead") of a member
        that was neither frozen nor killed in the 5 s before, by a viewer on
        its side of any partition: a member declared dead by a node that
        could reach it.  Returns (all deaths logged, those, the ones whose
        viewer was itself frozen or restarted then).  Log times have a
        resolution of one second."""
        side = {nd.name: nd.i >= N - 2 for nd in self.nodes}
        pat = re.compile(r"^(\S+)Z \w+\s+cluster: member (\S+) \(.*\) is dead")
        out, woke, total = [], [], 0
        for nd in self.nodes:
            for life in range(1, nd.lives + 1):
                path = os.path.join(self.tmp, "%s-life%d.log" % (nd.name, life))
                try:
                    lines = open(path, errors="replace").read().splitlines()
                except OSError:
                    continue
                for ln in lines:
                    m = pat.match(ln)
                    if not m or m.group(2) not in side:
                        continue
                    total += 1
                    wall = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
                    t, subj = wall - self.wall0, m.group(2)
                    if any(a - 1 <= t + 1 and t - 5 <= b for a, b in self.down.get(subj, [])):
                        continue
                    if side[nd.name] != side[subj] and any(
                            a - 1 <= t + 1 and t - 5 <= b for a, b in self.partitions):
                        continue
                    if any(a - 1 <= t + 1 and t - 5 <= b for a, b in self.down.get(nd.name, [])):
                        woke.append((round(t), nd.name, subj))
                        continue
                    out.append((round(t), nd.name, subj))
        return total, out, woke

    def quiet(self, nd, t):
        """Whether nd has been up, unfrozen and unpartitioned for GRACE_S."""
        if nd.state != "up" or time.monotonic() - nd.changed < GRACE_S or self.parted:
            return False
        return not any(t - healed < GRACE_S for _, healed in self.partitions)

    def judge_views(self):
        """Every quiet node must see every other quiet node alive: a dead,
        left or missing entry is a split or a false death."""
        t = self.now()
        for nd in self.nodes:
            if not self.quiet(nd, t):
                continue
            try:
                c = Conn(nd.sock, timeout=2.0)
                rows = c.call("SL.MEMBERS")
                info = c.call("INFO", "cluster")
                c.close()
                view = {r[0].decode(): r[2].decode() for r in rows}
            except (OSError, Closed, ValueError, AttributeError, IndexError):
                continue  # an unanswered request is counted by the workers
            t = self.now()
            if not self.quiet(nd, t):
                continue
            self.views += 1
            for other in self.nodes:
                if other is nd or not self.quiet(other, t):
                    continue
                st = view.get(other.name, "missing")
                if st == "suspect":
                    self.suspect_obs.append((round(t, 1), nd.name, other.name))
                elif st != "alive":
                    self.split_obs.append((round(t, 1), nd.name, other.name, st))
            if isinstance(info, bytes):
                f = dict(ln.split(":", 1) for ln in info.decode().splitlines() if ":" in ln)
                if f.get("cluster_state") != "ok" and all(self.quiet(o, t) for o in self.nodes):
                    self.not_ready.append((round(t, 1), nd.name, f.get("cluster_state"),
                                           f.get("cluster_state_reason")))

    def write_config(self, good, rate=20):
        with open(self.config + ".tmp", "w") as f:
            f.write(GOOD_CONFIG % rate if good else BAD_CONFIG)
        os.replace(self.config + ".tmp", self.config)

    def count(self, table, kind, n=1):
        with self.lock:
            table[kind] = table.get(kind, 0) + n

    def budget(self, n=1):
        with self.lock:
            self.requests += n
            return self.requests <= self.max_requests

    def now(self):
        return time.monotonic() - self.t0

    def exchange(self, nd, box, frames, kind):
        """Sends frames to nd on the connection in box[0] (opened if need
        be) and reads one reply each; returns them, or None when the node
        did not answer (counted as excused if it was disturbed meanwhile)."""
        gen, state = nd.gen, nd.state
        try:
            if box[0] is None:
                box[0] = Conn(nd.sock)
            c = box[0]
            c.send(b"".join(frames))
            replies = [c.reply() for _ in frames]
        except (OSError, Closed, ValueError) as e:
            if box[0] is not None:
                box[0].close()
                box[0] = None
            if state != "up" or nd.state != "up" or gen != nd.gen:
                self.count(self.excused, kind, len(frames))
            else:
                with self.lock:
                    self.missing.append((round(self.now(), 2), nd.name, kind, repr(e)))
            time.sleep(0.05)
            return None
        for r in replies:
            if isinstance(r, Err):
                self.count(self.errors, "%s: %s" % (kind, r.text[:60]))
        with self.lock:
            self.ok += len(replies)
        return replies

    def hot_worker(self, nd):
        box = [None]
        period = 1.0 / HOT_RPS
        nxt = time.monotonic()
        frame = sluicetest.resp_command("CL.THROTTLE", "hot", HOT_BURST, HOT_RATE, 1, 1)
        while not self.stop and self.budget():
            now = time.monotonic()
            if now < nxt:
                time.sleep(nxt - now)
            nxt = max(nxt + period, time.monotonic() - 1.0)
            rep = self.exchange(nd, box, [frame], "hot CL.THROTTLE")
            if rep and isinstance(rep[0], list):
                with self.lock:
                    self.hot.append((self.now(), nd.i, rep[0][0] == 0))
        if box[0] is not None:
            box[0].close()

    def mixed_worker(self, nd, rng):
        box = [None]
        cmd = sluicetest.resp_command

        def key(prefix=""):
            space = GLOBAL_KEYSPACE if prefix in ("sg:", "tb:") else KEYSPACE
            return "%sk%d" % (prefix, rng.randrange(space))
        while not self.stop and self.budget():
            op = rng.randrange(100)
            if op < 40:
                frames, kind = [cmd("CL.THROTTLE", key(), 5, 10, 1, 1)], "CL.THROTTLE"
            elif op < 65:
                p = rng.choice(["sg:", "tb:", "sw:", "sl:", "dry:"])
                frames, kind = [cmd("SL.THROTTLE", key(p))], "SL.THROTTLE " + p
            elif op < 75:
                frames = [cmd("SL.MULTI", "KEY", key("sg:"), "KEY", key("sw:"),
                              "KEY", key("sl:"))]
                kind = "SL.MULTI"
            elif op < 85:
                frames = [cmd("SL.ACQUIRE", "tb:acq%d" % rng.randrange(50), "TIMEOUT",
                              rng.choice([0, 10, 50, 200]))]
                kind = "SL.ACQUIRE"
            else:
                frames = [cmd("CL.THROTTLE", key(), 5, 10, 1, 1) for _ in range(16)]
                kind = "pipeline"
                self.budget(15)
            self.exchange(nd, box, frames, kind)
            time.sleep(0.002)
        if box[0] is not None:
            box[0].close()

    def rude_worker(self, nd, rng):
        """Malformed frames, oversize keys, connections dropped mid-command.
        An error reply or a closed connection is the right answer to bad
        input; a node that was up and answered neither is a failure."""
        cmd = sluicetest.resp_command
        while not self.stop and self.budget():
            time.sleep(0.02)
            op = rng.randrange(5)
            gen, state = nd.gen, nd.state
            try:
                c = Conn(nd.sock)
            except OSError:
                self.count(self.rude, "connect refused (node %s)" % nd.state)
                continue
            try:
                if op == 0:  # a frame that is not RESP
                    c.send(rng.choice([b"*2\r\n$x\r\nab\r\n", b"*1\r\n:5\r\n",
                                       b"$-7\r\n", b"*-2\r\n*1\r\n$3\r\nfoo\r\n"]))
                    r = c.reply()
                    self.count(self.rude, "malformed: " + (
                        "error reply" if isinstance(r, Err) else "other reply"))
                elif op == 1:  # a key past --max-key-bytes, then the link must work
                    r = c.call("CL.THROTTLE", "x" * 600, 5, 10, 1, 1)
                    p = c.call("PING")
                    self.count(self.rude, "oversize key: %s, then %s" % (
                        "error" if isinstance(r, Err) else "accepted",
                        "PONG" if p == b"PONG" else repr(p)))
                elif op == 2:  # half a command, then gone
                    f = cmd("SL.THROTTLE", "sw:half", "QTY", 1)
                    c.send(f[:rng.randrange(1, len(f))])
                    self.count(self.rude, "dropped mid-command")
                elif op == 3:  # gone while waiting in SL.ACQUIRE
                    c.send(cmd("SL.ACQUIRE", "tb:waitgone", "QTY", 5, "TIMEOUT", 3000))
                    time.sleep(rng.random() * 0.05)
                    self.count(self.rude, "dropped while waiting")
                else:  # a pipeline never read
                    c.send(b"".join(cmd("CL.THROTTLE", "k%d" % rng.randrange(KEYSPACE),
                                        5, 10, 1, 1) for _ in range(64)))
                    self.count(self.rude, "dropped with unread replies")
            except Closed:
                self.count(self.rude, "closed by the daemon (op %d)" % op)
            except (OSError, ValueError) as e:
                if state != "up" or nd.state != "up" or gen != nd.gen:
                    self.count(self.rude, "no answer while disturbed")
                else:
                    with self.lock:
                        self.missing.append((round(self.now(), 2), nd.name,
                                             "rude op %d" % op, repr(e)))
            finally:
                c.close()

    def check_alive(self):
        for nd in self.nodes:
            if nd.state != "down" and nd.d.proc.poll() is not None:
                self.unexpected_deaths.append((round(self.now(), 1), nd.name,
                                               nd.d.proc.returncode, nd.d.logpath))
                nd.state = "down"
                nd.gen += 1

    def sample(self):
        self.check_alive()
        total = 0
        for nd in self.nodes:
            if nd.state != "up":
                continue
            kb = rss_kb(nd.pid())
            if kb is not None:
                nd.rss.append((self.now(), nd.lives, kb))
            try:
                total += sum(node_keys(nd.sock))
            except (OSError, Closed, ValueError):
                pass
        self.keys.append((self.now(), total))
        self.judge_views()
        url = "http://127.0.0.1:%d/metrics" % self.nodes[0].mport
        if self.netns:  # the endpoint is in node1's namespace
            r = subprocess.run(self.nodes[0].prefix() + [
                sys.executable, "-c", "import sys, urllib.request as u; "
                "sys.stdout.buffer.write(u.urlopen(sys.argv[1], timeout=3).read())", url],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if r.returncode != 0 or b"sluice_decisions_total" not in r.stdout:
                self.metrics_fail += 1
            return
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                if b"sluice_decisions_total" not in r.read():
                    self.metrics_fail += 1
        except OSError:
            self.metrics_fail += 1

    def hup_all(self):
        for nd in self.nodes:
            if nd.state == "up":
                os.kill(nd.pid(), signal.SIGHUP)

    def members_alive(self, timeout=10.0):
        """Waits until every up node sees all N alive; returns the views
        that did not, or [] (at most timeout seconds)."""
        want = sorted(nd.name for nd in self.nodes)
        deadline = time.monotonic() + timeout
        while True:
            bad = []
            for nd in self.nodes:
                if nd.state != "up":
                    continue
                try:
                    c = Conn(nd.sock)
                    rows = c.call("SL.MEMBERS")
                    c.close()
                    view = {r[0].decode(): r[2].decode() for r in rows}
                except (OSError, Closed, ValueError) as e:
                    view = {"error": repr(e)}
                if sorted(k for k, v in view.items() if v == "alive") != want:
                    bad.append((nd.name, view))
            if not bad or time.monotonic() > deadline:
                return bad
            time.sleep(0.2)

    def side_daemon(self, name, args, host):
        d = sluicetest.Daemon(*args, socket_path=os.path.join(self.tmp, name + ".sock"),
                              tmpdir=self.tmp, prefix=host.prefix())
        d.logpath = os.path.join(self.tmp, "%s-%d.log" % (name, len(self.events)))
        return d

    def duplicate_name(self):
        """A copy of node2's unit started by mistake: refused, no trace."""
        nd = self.nodes[1]
        args = list(nd.args)
        port = 7947 if self.netns else sluicetest.free_udp_ports(1)[0]
        args[args.index("--gossip-bind") + 1] = "%s:%d" % (nd.host, port)
        args[args.index("--metrics") + 1] = "127.0.0.1:%d" % sluicetest.free_tcp_port()
        d = self.side_daemon("dup", args, nd)
        d.start(wait=False)
        try:
            st = d.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            st = None
        finally:
            d.kill()
            d.log.close()
        if st != 1:
            self.side_fail.append("a duplicate %s exited %s (log %s)" % (nd.name, st, d.logpath))
        bad = self.members_alive()
        if bad:
            self.side_fail.append("after a refused duplicate of %s: %s" % (nd.name, bad))
        return "duplicate %s started: exit %s, all members alive in every view: %s" % (
            nd.name, st, "yes" if not bad else "NO")

    def wrong_key(self):
        """A node started with another cluster key: not ready, never a member."""
        other = os.path.join(self.tmp, "other.key")
        if not os.path.exists(other):
            sluicetest.write_cluster_key(other)
        args = list(self.nodes[0].args)
        args[args.index("--node-name") + 1] = "stranger"
        host = self.nodes[0]
        port = 7948 if self.netns else sluicetest.free_udp_ports(1)[0]
        args[args.index("--gossip-bind") + 1] = "%s:%d" % (host.host, port)
        args[args.index("--metrics") + 1] = "127.0.0.1:%d" % sluicetest.free_tcp_port()
        args[args.index("--cluster-key-file") + 1] = other
        d = self.side_daemon("stranger", args, host)
        state = "?"
        try:
            d.start()
            time.sleep(3.0)
            c = Conn(d.path)
            info = c.call("INFO", "cluster").decode()
            c.close()
            state = [ln for ln in info.splitlines() if ln.startswith("cluster_state:")][0]
            if state != "cluster_state:not_ready":
                self.side_fail.append("a node with another key says %s" % state)
        except (OSError, Closed, ValueError, IndexError) as e:
            self.side_fail.append("a node with another key: %r" % e)
        finally:
            if d.proc is not None and d.proc.poll() is None:
                d.stop()
            d.kill()
            d.log.close()
        bad = self.members_alive()
        if bad:
            self.side_fail.append("after a wrong-key start: %s" % bad)
        return "a node with another cluster key: %s, members unchanged: %s" % (
            state, "yes" if not bad else "NO")

    def disturb(self, k):
        """One disturbance, in turn: good reload, a freeze, bad reload, a
        kill -9 and restart, a duplicate-name start, a wrong-key start and
        (--netns) a partition.  Freezes and kills rotate over node2..nodeN,
        so that every seed but node1 (the leak probe) is restarted."""
        kinds = 7 if self.netns else 6
        what = k % kinds
        turn = 1 + (k // kinds) % (N - 1)  # node2..nodeN in turn
        t = self.now()
        if what == 4:
            self.events.append((round(t, 1), self.duplicate_name()))
        elif what == 5:
            self.events.append((round(t, 1), self.wrong_key()))
        elif what == 6:
            self.events.append((round(t, 1), self.partition()))
        elif what == 0:
            self.write_config(True, rate=20 + (k // 4) % 2 * 10)
            self.hup_all()
            self.events.append((round(t, 1), "SIGHUP, good config"))
        elif what == 1:
            nd = self.nodes[turn]
            nd.state = "frozen"
            nd.gen += 1
            nd.changed = time.monotonic()
            os.kill(nd.pid(), signal.SIGSTOP)
            time.sleep(FREEZE_S)
            os.kill(nd.pid(), signal.SIGCONT)
            self.down.setdefault(nd.name, []).append((t, self.now()))
            nd.state = "up"
            nd.gen += 1
            nd.changed = time.monotonic()
            self.events.append((round(t, 1), "SIGSTOP %s for %.0f s" % (nd.name, FREEZE_S)))
        elif what == 2:
            self.write_config(False)
            self.hup_all()
            self.events.append((round(t, 1), "SIGHUP, bad config"))
            time.sleep(0.5)
            self.write_config(True)  # a restart must find a good file
        else:
            nd = self.nodes[turn if N > 3 else 2]
            nd.state = "down"
            nd.gen += 1
            nd.changed = time.monotonic()
            nd.d.proc.kill()
            nd.d.proc.wait()
            time.sleep(1.0)
            nd.start()
            self.down.setdefault(nd.name, []).append((t, self.now()))
            self.events.append((round(t, 1), "kill -9 %s, restarted after 1 s" % nd.name))

    def run(self):
        for nd in self.nodes:
            nd.start()
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        rng = random.Random(self.seed)
        threads = []
        for nd in self.nodes:
            threads.append(threading.Thread(target=self.hot_worker, args=(nd,)))
            threads.append(threading.Thread(target=self.mixed_worker,
                                            args=(nd, random.Random(rng.getrandbits(64)))))
            threads.append(threading.Thread(target=self.rude_worker,
                                            args=(nd, random.Random(rng.getrandbits(64)))))
        for th in threads:
            th.daemon = True
            th.start()
        every = min(30.0, max(3.0, self.seconds / 16.0))
        sample_every = 2.0 if self.seconds <= 60 else 5.0
        next_dist, next_sample, k = min(3.0, every), 0.0, 0
        while self.now() < self.seconds and self.requests < self.max_requests:
            if self.now() >= next_sample:
                self.sample()
                next_sample += sample_every
            if next_dist <= self.now() < self.seconds - 2.5:
                self.disturb(k)
                k += 1
                next_dist += every
            time.sleep(0.05)
        self.sample()
        self.load_end = self.now()
        self.stop = True
        for th in threads:
            th.join(REQ_TIMEOUT + 5)
        # Reclaim: keys must fall back once nobody asks.
        self.peak_keys = max(n for _, n in self.keys)
        deadline = time.monotonic() + RECLAIM_WAIT_S
        while time.monotonic() < deadline:
            self.check_alive()
            total, self.keys_split, gtotal = 0, [], 0
            for nd in self.nodes:
                try:
                    lk, gk = node_keys(nd.sock)
                except (OSError, Closed, ValueError):
                    lk, gk = 10 ** 9, 0
                total += lk
                gtotal += gk
                self.keys_split.append("%s %d local %d global" % (nd.name, lk, gk))
            self.keys_after, self.global_after = total, gtotal
            if total <= self.peak_keys * 0.05 + 10 and (
                    gtotal <= self.peak_keys * 0.05 + 10 or
                    time.monotonic() > deadline - 2):
                self.reclaim = self.now() - self.load_end
                break
            time.sleep(1.0)
        self.check_alive()

    def shutdown(self):
        """SIGTERM every node still running; returns failures."""
        bad = []
        for nd in self.nodes:
            if nd.d is None:
                continue
            try:
                if nd.d.proc.poll() is None:
                    os.kill(nd.pid(), signal.SIGCONT)
                    st = nd.d.stop()
                    if st != 0:
                        bad.append("%s exited %d on SIGTERM (log %s)" % (nd.name, st,
                                                                        nd.d.logpath))
            finally:
                nd.d.kill()
                nd.d.log.close()
        return bad


def report(s, fails):
    log("load %.0f s, %d requests (bound %d), %d replies" % (
        s.load_end, s.requests, s.max_requests, s.ok))
    for t, what in s.events:
        log("  %6.1f s  %s" % (t, what))
    fails += s.side_fail
    for t, name, rc, path in s.unexpected_deaths:
        fails.append("%s died on its own by %.1f s (status %s, log %s)" % (name, t, rc, path))
    if s.missing:
        fails.append("%d requests to an up node got no reply, e.g. %s" % (
            len(s.missing), s.missing[:5]))
    if s.errors:
        fails.append("error replies to well-formed requests: %s" % s.errors)
    log("missing replies excused (node frozen or killed): %d %s" % (
        sum(s.excused.values()), s.excused or ""))
    log("missing replies from up nodes: %d; error replies: %d %s" % (
        len(s.missing), sum(s.errors.values()), s.errors or ""))
    log("rude input: %s" % ", ".join("%s %d" % kv for kv in sorted(s.rude.items())))
    wrong = [k for k in s.rude if "other reply" in k or
             (k.startswith("oversize") and k != "oversize key: error, then PONG")]
    if wrong:
        fails.append("bad input was not refused: %s" % wrong)
    if s.metrics_fail:
        fails.append("metrics endpoint failed %d times" % s.metrics_fail)
    warm = min(60.0, max(5.0, 0.2 * s.seconds))
    for nd in s.nodes:
        life = [(t, kb) for t, lf, kb in nd.rss if lf == nd.lives and t <= s.load_end + 0.5]
        after = [(t, kb) for t, kb in life if t >= warm]
        if len(after) < 2 or after[-1][0] - after[0][0] < 0.5 * (s.load_end - warm):
            log("rss %s: life %d too short to judge" % (nd.name, nd.lives))
            continue
        (t1, w), (t2, last) = after[0], after[-1]
        bound = 1.5 * w + RSS_SLACK_KB
        rate = (last - w) / ((t2 - t1) / 60.0)
        log("rss %s: %.1f MB at %.0f s -> %.1f MB at %.0f s (%+.0f kB/min; bound %.1f MB), "
            "peak %.1f MB" % (nd.name, w / 1024, t1, last / 1024, t2, rate, bound / 1024,
                              max(kb for _, kb in life) / 1024))
        if last > bound:
            fails.append("%s RSS grew from %d kB to %d kB (bound %d kB)" % (
                nd.name, w, last, bound))
    if s.reclaim is None:
        fails.append("keys did not fall back within %.0f s: peak %d, now %d (%s)" % (
            RECLAIM_WAIT_S, s.peak_keys, s.keys_after, ", ".join(s.keys_split)))
    else:
        log("keys: peak %d (all nodes), %d local and %d global %.1f s after the load "
            "stopped (%s)" % (s.peak_keys, s.keys_after, s.global_after, s.reclaim,
                              ", ".join(s.keys_split)))
    ans = sorted(s.hot)
    adm = [a[0] for a in ans if a[2]]
    if s.partitions:
        # Each side of a partition admits the whole limit (availability
        # first): the ratio is judged on the answers outside partitions and
        # the GRACE_S after each heals, and printed for the whole run too.
        whole = sorted(s.hot)
        wgot = sum(1 for a in whole if a[2])
        wref = sluicetest.gcra_oracle(whole, HOT_BURST, HOT_RATE)
        log("whole run, partitions included: admitted/oracle %.3f (%d / %d)" % (
            wgot / wref if wref else 0.0, wgot, wref))
        ans = [a for a in whole if not any(p <= a[0] <= h + GRACE_S for p, h in s.partitions)]
    got, ref = sum(1 for a in ans if a[2]), sluicetest.gcra_oracle(ans, HOT_BURST, HOT_RATE)
    ratio = got / ref if ref else 0.0
    per = [sum(1 for a in ans if a[2] and a[1] == i) for i in range(N)]
    log("soak ratio admitted/oracle %.3f (hot key: %d answers, admitted %d, per node %s, "
        "central GCRA %d)" % (ratio, len(ans), got, per, ref))
    if not 0.85 <= ratio <= 1.15:
        fails.append("hot key admitted/oracle %.3f outside [0.85, 1.15]" % ratio)
    # The worst WINDOW_S of the global key against what the limit allows in
    # that time (burst + 1 at once, then the rate): a partition lets each
    # side admit the whole limit (availability first), so windows that touch
    # one are reported apart and not judged.
    allow = HOT_BURST + 1 + HOT_RATE * WINDOW_S
    worst, worst_p, at, at_p, j = 0, 0, 0.0, 0.0, 0
    for i, t in enumerate(adm):
        while adm[j] < t - WINDOW_S:
            j += 1
        n = i - j + 1
        touch = any(a - GRACE_S <= t and t - WINDOW_S <= h + GRACE_S
                    for a, h in s.partitions)
        if touch and n > worst_p:
            worst_p, at_p = n, t
        elif not touch and n > worst:
            worst, at = n, t
    log("hot key worst %.0f s window: %d admitted at %.0f s, %.2f of the %d the limit allows"
        % (WINDOW_S, worst, at, worst / allow, allow))
    if s.partitions:
        log("hot key worst %.0f s window touching a partition: %d at %.0f s, %.2f of the limit"
            % (WINDOW_S, worst_p, at_p, worst_p / allow))
    if worst > 1.25 * allow:
        fails.append("hot key admitted %d in %.0f s (at %.0f s), over 1.25x the %d allowed" % (
            worst, WINDOW_S, at, allow))
    log("membership: %d views judged in quiet times; %d split/false-dead entries, "
        "%d suspect entries, %d not-ready answers" % (
            s.views, len(s.split_obs), len(s.suspect_obs), len(s.not_ready)))
    if s.suspect_obs:
        log("  suspect (first 10): %s" % s.suspect_obs[:10])
    dead_lines, false_dead, woke = s.false_deaths()
    log("deaths logged by the daemons: %d; of a member up, unfrozen and reachable from the "
        "viewer (false deaths): %d %s; by a viewer itself frozen or restarted in the 5 s "
        "before (printed, not judged): %d %s" % (dead_lines, len(false_dead), false_dead[:10],
                                                 len(woke), woke[:10]))
    if s.split_obs:
        fails.append("healthy members seen not alive (t, viewer, subject, state): %s" %
                     s.split_obs[:10])
    if s.not_ready:
        fails.append("cluster_state not ready on a quiet cluster: %s" % s.not_ready[:10])
    for f in fails:
        log("FAIL: " + f)
    log("soak %s" % ("FAILED" if fails else "passed"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=sluicetest.BIN, help="directory of sluiced, sluicectl")
    ap.add_argument("--seconds", type=float, default=600.0, help="seconds of load")
    ap.add_argument("--nodes", type=int, default=3, help="cluster size (3..9)")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep the daemons' logs even when the run passes")
    ap.add_argument("--netns", nargs="?", const="yes", default="no",
                    choices=["yes", "no", "auto"],
                    help="each node in a network namespace of its own (root), and "
                    "partitions among the disturbances; auto: if namespaces can be made")
    a = ap.parse_args()
    if not 10 <= a.seconds <= 7 * 86400:
        ap.error("--seconds must be between 10 and 604800")
    if not 3 <= a.nodes <= 9:
        ap.error("--nodes must be between 3 and 9")
    global N
    N = a.nodes
    netns = a.netns == "yes"
    if a.netns == "auto":
        netns = sluicetest.Lan.possible()
        if not netns:
            log("no network namespaces here (not root?): 127.0.0.1, no partitions")
    sluicetest.SLUICED = os.path.join(a.bin, "sluiced")
    sluicetest.SLUICECTL = os.path.join(a.bin, "sluicectl")
    seed = int(os.environ.get("SLUICE_SEED", "0")) or (time.time_ns() & 0xFFFFFFFF)
    log("seed %d (replay with SLUICE_SEED=%d)" % (seed, seed))
    tmp = tempfile.mkdtemp(prefix="sluice-soak-")
    fails = []
    s = None
    try:
        s = Soak(a.seconds, seed, tmp, netns=netns)
        s.run()
    finally:
        if s is not None:
            fails += s.shutdown()
            s.del_netns()
    report(s, fails)
    if fails or a.keep_logs:
        log("daemon logs kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
