#!/usr/bin/python3
"""Real-socket gossip: gossip_agent processes on 127.0.0.1 with sealed packets.

What a user of libgossip cares about, checked on real UDP sockets:
  1. three nodes sharing a key file find each other through a seed list and
     each sees three alive members;
  2. a node with the wrong key, and one with the right key but another cluster
     label, never appear in anyone's membership, and the good nodes count
     their packets as dropped;
  3. a node killed with SIGKILL is reported dead by both survivors within a
     bound derived from the configured probe timings;
  4. a node leaving gracefully (SIGTERM) is reported "left", and its process
     exits 0.

Every wait is bounded; every child is killed at the end, even on failure.
Finds the agent at $SLUICE_TESTS_BIN/gossip_agent.
"""
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402

AGENT = os.path.join(os.environ.get("SLUICE_TESTS_BIN", "build/tests"), "gossip_agent")

# Fast protocol timings so the test takes seconds, not minutes.
TIMINGS = [
    "--probe-interval-ms", "200",
    "--probe-timeout-ms", "100",
    "--gossip-interval-ms", "50",
    "--suspicion-mult", "3",
    "--pushpull-interval-ms", "1000",
    "--dead-reap-ms", "60000",
    "--join-interval-ms", "500",
]
CONVERGE_S = 20.0  # three nodes find each other
QUIET_S = 4.0      # the longest strangers are given to be heard (and refused)
DEAD_S = 15.0      # a killed node is declared dead (detection + suspicion)
LEFT_S = 10.0


class Agent:
    """One gossip_agent process; its stdout is parsed by a reader thread."""

    def __init__(self, name, port, join, key_file, label):
        self.name = name
        self.port = port
        self.lines = []
        self.view = {}  # member name -> last event ("join", "alive", "dead", ...)
        self.dump = []  # lines of the last SIGUSR1 dump
        self.dumps = 0
        self.lock = threading.Lock()
        args = [AGENT, "--name", name, "--bind", "127.0.0.1:%d" % port,
                "--join", join, "--key-file", key_file, "--label", label] + TIMINGS
        self.errf = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.errf,
                                     text=True, bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        current = []
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            with self.lock:
                self.lines.append(line)
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "event":
                    self.view[parts[2]] = parts[1]
                elif parts and parts[0] in ("member", "stats"):
                    current.append(line)
                elif line == "members end":
                    self.dump = current
                    self.dumps += 1
                    current = []

    def saw(self, other):
        with self.lock:
            return other in self.view

    def state_of(self, other):
        with self.lock:
            return self.view.get(other)

    def alive_peers(self):
        with self.lock:
            return sorted(n for n, ev in self.view.items() if ev in ("join", "alive"))

    def ready(self):
        with self.lock:
            return any(l.startswith("ready ") for l in self.lines)

    def members(self, timeout=5.0):
        """Asks for a member dump (SIGUSR1); returns ({name: state}, stats dict)."""
        with self.lock:
            before = self.dumps
        self.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: self.dumps > before, timeout, "%s: member dump" % self.name)
        with self.lock:
            dump = list(self.dump)
        states, stats = {}, {}
        for line in dump:
            p = line.split()
            if p[0] == "member":
                states[p[1]] = p[3]
            else:
                stats = dict(kv.split("=", 1) for kv in p[1:])
        return states, {k: int(v) for k, v in stats.items()}

    def describe(self):
        self.errf.seek(0)
        err = self.errf.read().decode(errors="replace")
        with self.lock:
            out = "\n".join(self.lines[-40:])
        return "--- %s (rc=%s) stdout tail:\n%s\n--- stderr:\n%s" % (
            self.name, self.proc.poll(), out, err[-2000:])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class Failure(Exception):
    pass


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    if not pred():
        raise Failure("timed out after %.1fs waiting for: %s" % (timeout, what))


def check(cond, what):
    if not cond:
        raise Failure(what)


def write_key_file(path, key_id, key_hex):
    with open(path, "w") as f:
        f.write("# test cluster key\n%d %s use\n" % (key_id, key_hex))
    os.chmod(path, 0o600)


def main():
    if not os.access(AGENT, os.X_OK):
        print("FAIL: %s not found (set SLUICE_TESTS_BIN)" % AGENT)
        return 1
    agents = []
    tmp = tempfile.TemporaryDirectory(prefix="gossip-udp-")
    try:
        good_key = os.path.join(tmp.name, "good.keys")
        bad_key = os.path.join(tmp.name, "bad.keys")
        write_key_file(good_key, 1, secrets.token_hex(32))
        write_key_file(bad_key, 1, secrets.token_hex(32))  # same id, other bytes
        ports = sluicetest.free_udp_ports(5)
        seeds = ",".join("127.0.0.1:%d" % p for p in ports[:3])
        names = ["n1", "n2", "n3"]

        # 1. three nodes converge.
        for name, port in zip(names, ports[:3]):
            agents.append(Agent(name, port, seeds, good_key, "test-cluster"))
        n1, n2, n3 = agents
        for a in agents:
            wait_for(a.ready, 10, "%s ready" % a.name)
        for a in agents:
            others = sorted(n for n in names if n != a.name)
            wait_for(lambda a=a, o=others: a.alive_peers() == o, CONVERGE_S,
                     "%s sees %s alive" % (a.name, others))
        for a in agents:
            states, _ = a.members()
            check(states == {"n1": "alive", "n2": "alive", "n3": "alive"},
                  "%s member list: %s" % (a.name, states))
        print("ok: three nodes see three alive members")

        # 2. wrong key and wrong label stay out, and are counted as drops.
        stranger = Agent("wrongkey", ports[3], seeds, bad_key, "test-cluster")
        agents.append(stranger)
        other_cluster = Agent("otherlabel", ports[4], seeds, good_key, "other-cluster")
        agents.append(other_cluster)
        wait_for(stranger.ready, 10, "wrongkey ready")
        wait_for(other_cluster.ready, 10, "otherlabel ready")
        # Until the members have heard and refused them (their packets are
        # counted as drops), then they must not be in.
        def dropped():
            return sum(st.get("drop_auth", 0) + st.get("drop_nokey", 0)
                       for st in (a.members()[1] for a in (n1, n2, n3))) > 0

        wait_for(dropped, max(QUIET_S, 10), "the strangers' packets to be dropped")
        drops = 0
        for a in (n1, n2, n3):
            states, stats = a.members()
            check(set(states) == set(names),
                  "%s let a stranger in: %s" % (a.name, states))
            check(not a.saw("wrongkey") and not a.saw("otherlabel"),
                  "%s reported an event about a stranger" % a.name)
            drops += stats.get("drop_auth", 0) + stats.get("drop_nokey", 0)
        for s in (stranger, other_cluster):
            states, _ = s.members()
            check(set(states) == {s.name}, "%s got into the cluster: %s" % (s.name, states))
        check(drops > 0, "the strangers' packets were not counted as dropped")
        print("ok: wrong key and wrong label never join (%d packets dropped)" % drops)
        stranger.kill()
        other_cluster.kill()

        # 3. kill -9: both survivors report it dead.
        t0 = time.monotonic()
        n3.proc.kill()
        n3.proc.wait(timeout=5)
        for a in (n1, n2):
            wait_for(lambda a=a: a.state_of("n3") == "dead", DEAD_S,
                     "%s reports n3 dead" % a.name)
        print("ok: SIGKILLed node reported dead by both survivors after %.2fs (bound %.0fs)"
              % (time.monotonic() - t0, DEAD_S))
        states, _ = n1.members()
        check(states.get("n3") == "dead", "n1 member list after kill: %s" % states)

        # 4. graceful leave.
        n2.proc.send_signal(signal.SIGTERM)
        try:
            rc = n2.proc.wait(timeout=LEFT_S)
        except subprocess.TimeoutExpired:
            raise Failure("n2 did not exit on SIGTERM")
        check(rc == 0, "n2 exited with %d on SIGTERM" % rc)
        wait_for(lambda: n1.state_of("n2") == "left", LEFT_S, "n1 reports n2 left")
        print("ok: SIGTERM leaves gracefully (exit 0, reported left)")

        return 0
    except Failure as e:
        print("FAIL: %s" % e)
        for a in agents:
            print(a.describe())
        return 1
    finally:
        for a in agents:
            a.kill()
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
