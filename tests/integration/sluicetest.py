"""Helpers for integration tests that run a real sluiced.

Each test starts its own daemon on a socket in a fresh temporary directory,
waits (bounded) for the socket to answer, and stops it with SIGTERM, checking
that it exits 0 (under the sanitizers a leak or error makes it exit non-zero)
and that it removed its socket.  Binaries come from $SLUICE_BIN (default:
build/bin next to the source tree).
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "bin"))
SLUICED = os.path.join(BIN, "sluiced")
SLUICECTL = os.path.join(BIN, "sluicectl")

START_TIMEOUT = 10.0  # seconds; generous for sanitizer builds


def wait_for_socket(path, proc=None, timeout=START_TIMEOUT):
    """Returns once a connect() to path succeeds; raises after timeout or if
    proc exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("sluiced exited early with status %d" % proc.returncode)
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                return
            except OSError:
                pass
            finally:
                s.close()
        time.sleep(0.02)
    raise RuntimeError("socket %s did not appear within %.0fs" % (path, timeout))


def wait_until(cond, timeout=10.0, what="the condition", interval=0.01):
    """Polls cond() until it is true; fails with `what` after timeout
    seconds.  Tests wait for what they assert on, not for a time."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


_given = {socket.SOCK_DGRAM: set(), socket.SOCK_STREAM: set()}


def _fresh_ports(kind, n):
    """n ports of kind free right now on 127.0.0.1, all different and none
    handed out before by this process.  Each is held open until all are found
    so they differ; the kernel readily gives the same ephemeral port to two
    binds in a row, so without the record two calls (a daemon's --grpc and
    --http) could name one port.  Another process may still take a port
    before the caller binds it; the tests accept that small race rather than
    passing sockets to children."""
    held, ports = [], []
    try:
        for _ in range(64 + n):
            if len(ports) == n:
                break
            s = socket.socket(socket.AF_INET, kind)
            held.append(s)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port not in _given[kind]:
                ports.append(port)
        if len(ports) < n:
            raise RuntimeError("no %d fresh ports on 127.0.0.1" % n)
        _given[kind].update(ports)
        return ports
    finally:
        for s in held:
            s.close()


def free_udp_ports(n):
    """n UDP ports free right now on 127.0.0.1 (see _fresh_ports)."""
    return _fresh_ports(socket.SOCK_DGRAM, n)


def free_tcp_port():
    """A TCP port free right now on 127.0.0.1 (see _fresh_ports)."""
    return _fresh_ports(socket.SOCK_STREAM, 1)[0]


class Daemon:
    """A sluiced process on a private socket; use as a context manager."""

    def __init__(self, *args, socket_path=None, tmpdir=None, prefix=None, env=None,
                 binary=None):
        self.own_tmp = tmpdir is None
        self.prefix = list(prefix or [])  # e.g. ["faketime", "-f", "+1h"]
        self.env = env          # the environment (None: ours)
        self.binary = binary or SLUICED
        self.tmpdir = tmpdir or tempfile.mkdtemp(prefix="sluice-it-")
        self.path = socket_path or os.path.join(self.tmpdir, "sluice.sock")
        self.logpath = os.path.join(self.tmpdir, "sluiced-%d.log" % id(self))
        self.args = list(args)
        self.proc = None

    def start(self, wait=True):
        self.log = open(self.logpath, "wb")
        # A session of its own, so that signals reach sluiced through a
        # prefix that forks (faketime runs it as a child): stop() and kill()
        # signal the whole group, and nothing outlives the test.
        self.proc = subprocess.Popen(self.prefix + [self.binary, "--socket", self.path]
                                     + self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        if wait:
            try:
                wait_for_socket(self.path, self.proc)
            except Exception:
                self.kill()
                print(self.logtext())
                raise
        return self

    def logtext(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout=20):
        """SIGTERM, wait, return the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self._signal_group(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def _signal_group(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self):
        """SIGKILL to the daemon and anything its prefix forked."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self._signal_group(signal.SIGKILL)
                self.proc.wait()
            else:
                self._signal_group(signal.SIGKILL)  # a prefix's orphaned child

    def close(self):
        self.kill()
        self.log.close()
        if self.own_tmp:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                status = self.stop()
                if status != 0:
                    raise AssertionError("sluiced exited with status %d:\n%s"
                                         % (status, self.logtext()))
                if os.path.exists(self.path):
                    raise AssertionError("sluiced left its socket behind")
        finally:
            self.close()
        return False

    def connect(self, timeout=10.0):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.path)
        return s

    def info(self, section=""):
        """INFO [section]'s text, read over the Unix socket."""
        s = self.connect()
        try:
            s.sendall(resp_command("INFO", section) if section else resp_command("INFO"))
            head = recv_until(s, b"\r\n", limit=64)
            n = int(head[1:head.index(b"\r\n")])
            body = head[head.index(b"\r\n") + 2:]
            while len(body) < n + 2:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
        finally:
            s.close()
        return body[:n].decode()


def rss_kb(pid):
    """The resident set of process pid in kB (None once it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def recv_until(sock, want, limit=1 << 20):
    """Reads until the buffer ends with `want` bytes pattern count or EOF."""
    data = b""
    while not data.endswith(want) and len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def recv_all(sock):
    """Reads until the peer closes the connection."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def resp_command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def write_cluster_key(path):
    """A fresh cluster key file at path, private (mode 0600) as sluiced
    requires."""
    subprocess.run([SLUICECTL, "keygen", "-o", path], check=True)


def paced(todo, now, going, tick=0.01):
    """Yields (t, keys): the keys of todo (a sorted list of (time, key),
    as poisson_spread makes them) due at t = now(), in batches, as they
    come due, sleeping at most tick between looks; ends when todo is done
    or going(t) is false (every load loop ends on its own)."""
    j = 0
    while j < len(todo):
        t = now()
        if not going(t):
            return
        due = []
        while j < len(todo) and todo[j][0] <= t:
            due.append(todo[j][1])
            j += 1
        if due:
            yield t, due
        else:
            time.sleep(min(tick, max(0.0, todo[j][0] - t)))


def poisson_spread(rnd, key, rate, seconds, per_node):
    """Appends to per_node[i] the (time, key) of each request node i gets
    for key: a Poisson stream of `rate` requests a second over `seconds`,
    each request on a node drawn at random (a load balancer in front).
    rnd is a random.Random; the lists are left unsorted."""
    t = rnd.expovariate(rate)
    while t < seconds:
        per_node[rnd.randrange(len(per_node))].append((t, key))
        t += rnd.expovariate(rate)


def throttle_load(client, per_node, limit_of, seconds):
    """Sends every node's CL.THROTTLE requests at their times, one thread a
    node: per_node[i] is node i's sorted list of (seconds from the start,
    key), client(i) opens a redis client to node i, limit_of(key) gives the
    key's (burst, count, period).  The requests due in one tick go as one
    pipeline; a thread stops after its last request or at seconds + 5 s.
    Returns [(t_sent, key, allowed)] and the errors (repr, cut to 200
    characters: keys may be long)."""
    import redis
    answers, errors = [], []
    lock = threading.Lock()
    t0 = time.monotonic() + 0.2

    def worker(i):
        conn = client(i)
        for now, due in paced(per_node[i], lambda: time.monotonic() - t0,
                              lambda t: t < seconds + 5):
            try:
                p = conn.pipeline(transaction=False)
                for key in due:
                    p.execute_command("CL.THROTTLE", key, *limit_of(key), 1)
                reps = p.execute()
                with lock:
                    for key, rep in zip(due, reps):
                        answers.append((now, key, rep[0] == 0))
            except (redis.RedisError, OSError) as e:
                with lock:
                    errors.append(repr(e)[:200])
                conn = client(i)
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True)
               for i in range(len(per_node))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    return answers, errors


def wait_cluster_ready(client, n, timeout=20):
    """Until each of n nodes (client(i) opens a redis client to node i)
    says INFO cluster_state ok, as a load balancer would wait."""
    def ready():
        for i in range(n):
            with client(i) as r:
                if r.info("cluster").get("cluster_state") != "ok":
                    return False
        return True
    wait_until(ready, timeout=timeout, what="every node ready (INFO cluster_state)")


def gcra_admits(answers, burst, rate):
    """Whether one central GCRA (burst, rate per second) admits each of the
    same requests at the same times, as a list of bools; answers are tuples
    sorted by their first field, the request's time in seconds."""
    emission = 1.0 / rate
    cap = (burst + 1) * emission
    tat = None
    out = []
    for t, *_ in answers:
        if tat is None or tat < t:
            tat = t
        ok = tat + emission - t <= cap + 1e-9
        if ok:
            tat += emission
        out.append(ok)
    return out


def gcra_oracle(answers, burst, rate):
    """Units one central GCRA (burst, rate per second) admits for the same
    requests at the same times (gcra_admits)."""
    return sum(gcra_admits(answers, burst, rate))


def with_oracle(answers, key, burst, rate):
    """key's answers (PacedLoad.answers entries) in time order, each paired
    with whether one central GCRA (burst, rate per second) fed the same
    requests at the same times admits it: a list of (answer, bool)."""
    mine = sorted(a for a in answers if a[1] == key)
    return list(zip(mine, gcra_admits(mine, burst, rate)))


class PacedLoad:
    """Requests at planned times on n nodes, one thread per node: todo[i]
    is node i's list of (seconds from t0, key), which the caller fills and
    sorts before start(); ask(pipeline, key) queues the command for a key
    (CL.THROTTLE with its limit).  Each thread sends what is due on a
    pipeline of its own connection (clients(i): a redis client) and stops
    after its last request or at run_s + 5 s.  answers: (t, key, admitted,
    node); errors: what failed (repr)."""

    def __init__(self, clients, n, run_s):
        self.clients = clients
        self.run_s = run_s
        self.answers = []
        self.errors = []
        self.lock = threading.Lock()
        self.t0 = time.monotonic() + 0.2
        self.todo = [[] for _ in range(n)]
        self.threads = []

    def now(self):
        return time.monotonic() - self.t0

    def ask(self, pipe, key):
        raise NotImplementedError

    def worker(self, i):
        import redis
        conn = self.clients(i)
        for now, due in paced(self.todo[i], self.now, lambda t: t < self.run_s + 5.0):
            try:
                p = conn.pipeline(transaction=False)
                for key in due:
                    self.ask(p, key)
                reps = p.execute()
            except (redis.RedisError, OSError) as e:
                with self.lock:
                    self.errors.append(repr(e))
                continue
            with self.lock:
                for key, rep in zip(due, reps):
                    self.answers.append((now, key, rep[0] == 0, i))
        conn.close()

    def start(self):
        self.threads = [threading.Thread(target=self.worker, args=(i,), daemon=True)
                        for i in range(len(self.todo))]
        for t in self.threads:
            t.start()

    def join(self, timeout):
        for t in self.threads:
            t.join(timeout)


def members(client, state):
    """How many members client's node counts in state (alive, suspect,
    dead, left: INFO cluster members_<state>); closes the client."""
    with client as r:
        return int(r.info("cluster").get("members_%s" % state, 0))


class Lan:
    """Hosts in network namespaces of their own on one bridged LAN, for
    tests that cut the network between real daemons (needs root or
    CAP_NET_ADMIN; Lan.possible() says).  A hub namespace holds two
    bridges, br0 and br1; host i (0-based) lives in namespace ns(i) with
    address host(i) on eth0, whose veth peer sits on br0.  cut(indices)
    moves those hosts' peers to br1, so they hear each other and nobody
    else; heal() moves every peer back.  Nothing changes in the machine's
    own namespace; close() deletes every namespace it made (safe to call
    twice, and after a failed start)."""

    def __init__(self, n, net, tag):
        self.n = n
        self.net = net  # e.g. "10.78.0": host i is net.(i + 1)
        self.hub = "sl-%s-hub" % tag
        self.names = ["sl-%s-%d" % (tag, i + 1) for i in range(n)]
        self.made = []
        try:
            self._ip("netns", "add", self.hub)
            self.made.append(self.hub)
            for br in ("br0", "br1"):
                self._ip("-n", self.hub, "link", "add", br, "type", "bridge")
                self._ip("-n", self.hub, "link", "set", br, "up")
            for i, ns in enumerate(self.names):
                self._ip("netns", "add", ns)
                self.made.append(ns)
                self._ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name",
                         "p%d" % (i + 1), "netns", self.hub)
                self._ip("-n", self.hub, "link", "set", "p%d" % (i + 1), "master", "br0", "up")
                self._ip("-n", ns, "link", "set", "lo", "up")
                self._ip("-n", ns, "addr", "add", "%s/24" % self.host(i), "dev", "eth0")
                self._ip("-n", ns, "link", "set", "eth0", "up")
        except (OSError, subprocess.CalledProcessError):
            self.close()
            raise

    @staticmethod
    def possible():
        """True when this process may create network namespaces."""
        probe = "sl-probe-%d" % os.getpid()
        try:
            ok = subprocess.run(["ip", "netns", "add", probe], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL).returncode == 0
        except OSError:
            return False
        if ok:
            subprocess.run(["ip", "netns", "del", probe], stderr=subprocess.DEVNULL)
        return ok

    @staticmethod
    def _ip(*args):
        subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def ns(self, i):
        return self.names[i]

    def host(self, i):
        return "%s.%d" % (self.net, i + 1)

    def prefix(self, i):
        """The command prefix that runs a program in host i's namespace
        (`ip netns exec` execs it: signals reach the program itself)."""
        return ["ip", "netns", "exec", self.names[i]]

    def start_cluster(self, tmp, nodes):
        """Starts a clustered sluiced on every host (node names node0,
        node1, ...; sockets in tmp; no encryption; the tests' fast gossip
        timing, a probe every 200 ms), appending each Daemon to nodes as it
        starts (the caller closes them, even after a failed start), and
        waits until every node sees all of them alive.  Returns a function
        that opens a redis client to node i's socket."""
        import redis
        join = ",".join("%s:7946" % self.host(j) for j in range(self.n))
        for i in range(self.n):
            d = Daemon("--node-name", "node%d" % i, "--gossip-bind", "%s:7946" % self.host(i),
                       "--join", join, "--insecure-no-encryption",
                       "--gossip-interval-ms", "100", "--gossip-probe-interval-ms", "200",
                       socket_path=os.path.join(tmp, "n%d.sock" % i), tmpdir=tmp,
                       prefix=self.prefix(i))
            nodes.append(d)
            d.start()

        def client(i):
            return redis.Redis(unix_socket_path=nodes[i].path, socket_timeout=5)

        wait_until(lambda: all(members(client(i), "alive") == self.n for i in range(self.n)),
                   timeout=20, what="every node to see all %d" % self.n)
        return client

    def cut(self, indices):
        for i in indices:
            self._ip("-n", self.hub, "link", "set", "p%d" % (i + 1), "master", "br1")

    def heal(self):
        for i in range(self.n):
            self._ip("-n", self.hub, "link", "set", "p%d" % (i + 1), "master", "br0")

    def close(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.made = []
