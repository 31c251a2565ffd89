"""Named policies, every algorithm and config reloads on a real sluiced:
SL.THROTTLE with each algorithm, policies by name and by key prefix (also
overriding CL.THROTTLE), dry-run, SL.MULTI, RESP3 after HELLO 3, a bad
config refused at start naming its line, SIGHUP and SL.RELOAD applying a
changed limit to an existing key, a bad reload keeping the running policies
and saying why, and reloads under load losing no state and no connection."""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import SLUICECTL, Daemon, recv_until, resp_command  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)

REDIS_CLI = shutil.which("redis-cli")

BASE = """
[sluiced]
log_level = info

[policy reply]
algorithm = gcra
burst = 2
rate = 3 per 60s
match = reply:

[policy login]
algorithm = sliding-log
rate = 2 per 1m
match = login:

[policy api]
algorithm = sliding-window
rate = 4 per 1m
precision = 6
match = api:

[policy bucket]
algorithm = token-bucket
burst = 1
rate = 1 per 1h

[policy trial]
algorithm = fixed-window
rate = 1 per 1h
match = trial:
dry_run = true
"""


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def info_field(r, name):
    return int(r.info()[name])


class PolicyDaemon(Daemon):
    """A daemon started with --config on a file in its temporary directory."""

    def __init__(self, text=BASE, *args):
        super().__init__(*args)
        self.conf = os.path.join(self.tmpdir, "sluice.conf")
        write(self.conf, text)
        self.args = ["--config", self.conf] + list(args)

    def redis(self):
        return redis.Redis(unix_socket_path=self.path, socket_timeout=10)

    def reload_by_signal(self, r):
        """SIGHUP, then wait (bounded) until INFO counts the attempt."""
        before = info_field(r, "reloads") + info_field(r, "reload_failures")
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if info_field(r, "reloads") + info_field(r, "reload_failures") > before:
                return
            time.sleep(0.01)
        raise AssertionError("SIGHUP was not handled")


class TestAlgorithms(unittest.TestCase):
    def test_each_algorithm_inline(self):
        with PolicyDaemon() as d:
            r = d.redis()
            for algo, limit in (("gcra", 3), ("token-bucket", 3), ("fixed-window", 5),
                                ("sliding-window", 5), ("sliding-log", 5)):
                key = "inline:" + algo
                # an hour: no window boundary or refill during the test
                spec = ["ALGO", algo, "BURST", "2", "RATE", "5", "3600000"]
                for i in range(limit):
                    rep = r.execute_command("SL.THROTTLE", key, *spec)
                    self.assertEqual(rep[0], 0, (algo, i, rep))
                    self.assertEqual(rep[1], limit, algo)
                    self.assertEqual(rep[2], limit - i - 1, algo)
                    self.assertEqual(rep[3], -1)
                rep = r.execute_command("SL.THROTTLE", key, *spec)
                self.assertEqual(rep[0], 1, algo)
                self.assertGreater(rep[3], 0, algo)  # retry_after_ms
                self.assertGreater(rep[4], 0, algo)  # reset_after_ms
                # PEEK and SL.PEEK take nothing
                self.assertEqual(r.execute_command("SL.PEEK", key, *spec)[2], 0)
                # refund one, then one more fits
                self.assertEqual(r.execute_command("SL.REFUND", key, *spec, "QTY", "1")[2], 1)
                self.assertEqual(r.execute_command("SL.THROTTLE", key, *spec)[0], 0)
                self.assertEqual(r.execute_command("SL.RESET", key), 1)
                self.assertEqual(r.execute_command("SL.THROTTLE", key, *spec)[2], limit - 1)

    def test_argument_errors(self):
        with PolicyDaemon() as d:
            r = d.redis()
            cases = [
                (["SL.THROTTLE", "nomatch"], "no policy matches key and no ALGO given"),
                (["SL.THROTTLE", "k", "POLICY", "nope"], "no such policy 'nope'"),
                (["SL.THROTTLE", "k", "ALGO", "leaky", "RATE", "1", "1"], "unknown algorithm"),
                (["SL.THROTTLE", "k", "ALGO", "gcra"], "ALGO needs RATE"),
                (["SL.THROTTLE", "k", "ALGO", "gcra", "RATE", "0", "1"], "invalid limit"),
                (["SL.THROTTLE", "k", "ALGO", "gcra", "RATE", "x", "1"], "not an integer"),
                (["SL.THROTTLE", "k", "POLICY", "reply", "QTY", "-1"], "QTY must not be negative"),
                (["SL.THROTTLE", "k", "POLICY", "reply", "BOGUS"], "syntax error near 'BOGUS'"),
                (["SL.REFUND", "reply:x"], "QTY is required"),
                (["SL.ACQUIRE", "reply:x"], "TIMEOUT ms is required"),
                (["SL.MULTI", "KEY", "a", "ALGO", "gcra", "RATE", "1", "1", "KEY", "a", "ALGO",
                  "gcra", "RATE", "1", "1"], "duplicate key"),
            ]
            for args, text in cases:
                with self.assertRaises(redis.ResponseError, msg=args) as cm:
                    r.execute_command(*args)
                self.assertIn(text, str(cm.exception), args)
            self.assertTrue(r.ping())  # the connection stays usable


class TestPolicies(unittest.TestCase):
    def test_by_name_and_prefix(self):
        with PolicyDaemon() as d:
            r = d.redis()
            # by prefix: login: is a sliding log of 2 per minute
            self.assertEqual(r.execute_command("SL.THROTTLE", "login:alice")[:3], [0, 2, 1])
            self.assertEqual(r.execute_command("SL.THROTTLE", "login:alice")[:3], [0, 2, 0])
            self.assertEqual(r.execute_command("SL.THROTTLE", "login:alice")[0], 1)
            # by name, on any key
            self.assertEqual(r.execute_command("SL.THROTTLE", "x", "POLICY", "bucket")[:3],
                             [0, 2, 1])
            # the policy overrides CL.THROTTLE's own limit on its prefix, in
            # redis-cell's reply format (seconds)
            rep = r.execute_command("CL.THROTTLE", "reply:bob", "100", "100", "1", "3")
            self.assertEqual(rep[:3], [0, 3, 0])
            rep = r.execute_command("CL.THROTTLE", "reply:bob", "100", "100", "1")
            self.assertEqual(rep[0], 1)
            self.assertGreaterEqual(rep[3], 1)
            # a key under no prefix keeps the client's limit
            self.assertEqual(r.execute_command("CL.THROTTLE", "free", "100", "100", "1")[1], 101)
            # SL.POLICIES lists the file's policies in order
            pols = r.execute_command("SL.POLICIES")
            names = [dict(zip(p[::2], p[1::2]))[b"name"] for p in pols]
            self.assertEqual(names, [b"reply", b"login", b"api", b"bucket", b"trial"])
            api = dict(zip(pols[2][::2], pols[2][1::2]))
            self.assertEqual(api[b"algorithm"], b"sliding-window")
            self.assertEqual(api[b"precision"], 6)
            self.assertEqual(api[b"match"], b"api:")

    def test_dry_run_allows_and_counts(self):
        with PolicyDaemon() as d:
            r = d.redis()
            for _ in range(5):
                self.assertEqual(r.execute_command("SL.THROTTLE", "trial:x")[0], 0)
            self.assertEqual(info_field(r, "dry_run_would_limit"), 4)

    def test_multi_all_or_nothing(self):
        with PolicyDaemon() as d:
            r = d.redis()
            spec = ["ALGO", "fixed-window", "RATE", "10", "3600000"]
            # login:m has 2; asking 2 from it and from edge:m works once
            rep = r.execute_command("SL.MULTI", "QTY", "2", "KEY", "edge:m", *spec, "KEY",
                                    "login:m")
            self.assertEqual(rep[0], 0)
            self.assertEqual(rep[1][2], 8)
            self.assertEqual(rep[2][2], 0)
            # now login:m refuses: edge:m must not be charged
            rep = r.execute_command("SL.MULTI", "KEY", "edge:m", *spec, "KEY", "login:m")
            self.assertEqual(rep[0], 1)
            self.assertEqual(rep[1][0], 0)
            self.assertEqual(rep[2][0], 1)
            self.assertEqual(r.execute_command("SL.PEEK", "edge:m", *spec)[2], 8)

    def test_resp3(self):
        with PolicyDaemon() as d, d.connect() as s:
            s.sendall(resp_command("HELLO", "3"))
            hello = recv_until(s, b"modules\r\n*0\r\n")
            self.assertTrue(hello.startswith(b"%7\r\n"), hello)
            self.assertIn(b"proto\r\n:3\r\n", hello)
            s.sendall(resp_command("SL.THROTTLE", "login:r3"))
            rep = recv_until(s, b"$6\r\npolicy\r\n$5\r\nlogin\r\n")
            self.assertEqual(rep, b"%7\r\n$7\r\nlimited\r\n:0\r\n$5\r\nlimit\r\n:2\r\n"
                             b"$9\r\nremaining\r\n:1\r\n$14\r\nretry_after_ms\r\n:-1\r\n"
                             b"$14\r\nreset_after_ms\r\n:60000\r\n$9\r\nalgorithm\r\n"
                             b"$11\r\nsliding-log\r\n$6\r\npolicy\r\n$5\r\nlogin\r\n")
            s.sendall(resp_command("SL.THROTTLE", "k", "ALGO", "gcra", "RATE", "1", "1000"))
            rep = recv_until(s, b"policy\r\n_\r\n")
            self.assertTrue(rep.endswith(b"$4\r\ngcra\r\n$6\r\npolicy\r\n_\r\n"), rep)
            # back to RESP2
            s.sendall(resp_command("HELLO", "2"))
            recv_until(s, b"modules\r\n*0\r\n")
            s.sendall(resp_command("SL.PEEK", "login:r3"))
            # reset_after counts down from 60000 ms since the admission a few
            # round trips ago: read the whole reply (five integers), not a value.
            rep = b""
            while rep.count(b"\r\n") < 6:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rep += chunk
            self.assertTrue(rep.startswith(b"*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:"), rep)
            self.assertTrue(59000 <= int(rep.split(b":")[-1]) <= 60000, rep)

    @unittest.skipIf(REDIS_CLI is None, "redis-cli not installed")
    def test_redis_cli_resp3(self):
        with PolicyDaemon() as d:
            out = subprocess.run([REDIS_CLI, "-3", "-s", d.path, "SL.THROTTLE", "api:1"],
                                 capture_output=True, timeout=20, check=True).stdout.decode()
            self.assertIn("algorithm", out)
            self.assertIn("sliding-window", out)
            self.assertIn("api", out)


class TestConfigAndReload(unittest.TestCase):
    def test_bad_config_refused_at_start(self):
        d = PolicyDaemon(BASE + "\n[policy broken]\nalgorithm = gcra\nrate = lots\n")
        try:
            d.start(wait=False)
            status = d.proc.wait(timeout=20)
            self.assertEqual(status, 2)
            text = d.logtext()
            bad_line = (BASE + "\n[policy broken]\nalgorithm = gcra\n").count("\n") + 1
            self.assertIn("sluice.conf:%d:" % bad_line, text)
            self.assertFalse(os.path.exists(d.path))
        finally:
            d.close()

    def test_flags_override_file(self):
        text = BASE.replace("log_level = info", "log_level = info\nmax_clients = 1")
        with PolicyDaemon(text, "--max-clients", "5") as d:
            conns = [d.redis() for _ in range(3)]
            for c in conns:
                self.assertTrue(c.ping())

    def test_sighup_changes_existing_key(self):
        with PolicyDaemon() as d:
            r = d.redis()
            for _ in range(2):
                r.execute_command("SL.THROTTLE", "login:k")
            self.assertEqual(r.execute_command("SL.THROTTLE", "login:k")[0], 1)
            write(d.conf, BASE.replace("rate = 2 per 1m", "rate = 5 per 1m"))
            d.reload_by_signal(r)
            rep = r.execute_command("SL.THROTTLE", "login:k")
            self.assertEqual(rep[:3], [0, 5, 2])  # the 2 taken before still count
            # and down again: over the new limit at once
            write(d.conf, BASE.replace("rate = 2 per 1m", "rate = 1 per 1m"))
            self.assertEqual(r.execute_command("SL.RELOAD"), b"OK")
            self.assertEqual(r.execute_command("SL.THROTTLE", "login:k")[0], 1)
            self.assertEqual(info_field(r, "reloads"), 2)

    def test_bad_reload_keeps_old(self):
        with PolicyDaemon() as d:
            r = d.redis()
            write(d.conf, BASE + "\n[policy worse]\nalgorithm = sliding-log\nrate = x\n")
            with self.assertRaises(redis.ResponseError) as cm:
                r.execute_command("SL.RELOAD")
            self.assertIn("reload failed", str(cm.exception))
            self.assertIn("sluice.conf:", str(cm.exception))
            d.reload_by_signal(r)
            self.assertEqual(info_field(r, "reload_failures"), 2)
            self.assertIn("reload failed", d.logtext())
            # the old policies still answer
            self.assertEqual(r.execute_command("SL.THROTTLE", "login:z")[1], 2)
            self.assertEqual(len(r.execute_command("SL.POLICIES")), 5)

    def test_reload_under_load(self):
        """A client hammers a key at its limit and others while 20 reloads
        happen: the key stays limited (no state lost), no request fails and
        no connection drops."""
        with PolicyDaemon() as d:
            r = d.redis()
            for _ in range(2):
                r.execute_command("SL.THROTTLE", "login:hot")
            stop = threading.Event()
            errors = []
            counts = {"allowed_hot": 0, "calls": 0}

            def hammer():
                c = d.redis()
                i = 0
                deadline = time.monotonic() + 60
                try:
                    while not stop.is_set() and time.monotonic() < deadline:
                        rep = c.execute_command("SL.THROTTLE", "login:hot")
                        counts["allowed_hot"] += rep[0] == 0
                        c.execute_command("SL.THROTTLE", "api:%d" % (i % 50))
                        c.execute_command("CL.THROTTLE", "reply:%d" % (i % 50), "1", "1", "1")
                        counts["calls"] += 1
                        i += 1
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

            threads = [threading.Thread(target=hammer) for _ in range(2)]
            for t in threads:
                t.start()
            for i in range(20):
                if i % 2:
                    d.reload_by_signal(r)
                else:
                    self.assertEqual(r.execute_command("SL.RELOAD"), b"OK")
            stop.set()
            for t in threads:
                t.join(timeout=60)
            self.assertEqual(errors, [])
            self.assertGreater(counts["calls"], 0)
            self.assertEqual(counts["allowed_hot"], 0)
            self.assertEqual(info_field(r, "reloads"), 20)
            self.assertEqual(r.execute_command("SL.THROTTLE", "login:hot")[0], 1)


class TestSluicectl(unittest.TestCase):
    def ctl(self, d, *args):
        return subprocess.run([SLUICECTL, "-s", d.path] + list(args), capture_output=True,
                              timeout=20)

    def test_subcommands(self):
        with PolicyDaemon() as d:
            p = self.ctl(d, "sl", "login:c")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"allowed", p.stdout)
            self.ctl(d, "throttle-ex", "login:c")
            p = self.ctl(d, "sl", "login:c")
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"limited", p.stdout)
            p = self.ctl(d, "peek", "login:c")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"remaining=0", p.stdout)
            p = self.ctl(d, "refund", "login:c", "QTY", "1")
            self.assertEqual(p.returncode, 0, p.stderr)
            p = self.ctl(d, "reset", "login:c")
            self.assertEqual(p.returncode, 0, p.stderr)
            p = self.ctl(d, "acquire", "k", "ALGO", "gcra", "RATE", "1", "1000", "TIMEOUT", "10")
            self.assertEqual(p.returncode, 0, p.stderr)
            p = self.ctl(d, "multi", "KEY", "a", "POLICY", "bucket", "KEY", "login:c")
            self.assertEqual(p.returncode, 0, p.stderr)
            p = self.ctl(d, "policies")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"sliding-window", p.stdout)
            p = self.ctl(d, "reload")
            self.assertEqual(p.returncode, 0, p.stderr)
            write(d.conf, "[policy x]\nrate = nope\n")
            p = self.ctl(d, "reload")
            self.assertEqual(p.returncode, 2)
            self.assertIn(b"sluice.conf:2:", p.stderr)


if __name__ == "__main__":
    unittest.main()
