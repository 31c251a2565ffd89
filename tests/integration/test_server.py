"""sluiced over its Unix socket with real clients: redis-cli, redis-py, raw
sockets and sluicectl.  Each test runs its own daemon (see sluicetest.py)."""
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import (SLUICECTL, SLUICED, Daemon, recv_all, recv_exact,  # noqa: E402
                        recv_until, resp_command, wait_for_socket)

import redis  # noqa: E402  (Debian python3-redis)

REDIS_CLI = shutil.which("redis-cli")


def raise_fd_limit(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, max(soft, want))
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


class RedisCliTest(unittest.TestCase):
    @unittest.skipIf(REDIS_CLI is None, "redis-cli not installed")
    def test_readme_transcript_and_retry_after(self):
        with Daemon() as d:
            def cli(*args):
                out = subprocess.run([REDIS_CLI, "-s", d.path] + list(args),
                                     capture_output=True, timeout=10, check=True)
                return out.stdout.decode().split()

            # redis-cell's README transcript, byte for byte in numbers.
            self.assertEqual(cli("CL.THROTTLE", "user123", "15", "30", "60"),
                             ["0", "16", "15", "-1", "2"])
            # Burst of 2 (max_burst 1) at 1 per second, then denial.
            self.assertEqual(cli("CL.THROTTLE", "k", "1", "1", "1")[0], "0")
            self.assertEqual(cli("CL.THROTTLE", "k", "1", "1", "1")[0], "0")
            denied = cli("CL.THROTTLE", "k", "1", "1", "1")
            self.assertEqual(denied[0], "1")
            retry = int(denied[3])
            self.assertEqual(retry, 1)
            # Honour retry_after: after waiting it, the next call is allowed.
            time.sleep(retry + 0.05)
            self.assertEqual(cli("CL.THROTTLE", "k", "1", "1", "1")[0], "0")
            self.assertEqual(cli("PING"), ["PONG"])
            self.assertEqual(cli("cl.throttle", "k"),
                             ["Cell", "error:", "Store", "error:", "Usage:", "cl.throttle",
                              "<key>", "<max_burst>", "<count", "per", "period>", "<period>",
                              "[<quantity>]"])


class RedisPyTest(unittest.TestCase):
    def test_basic_and_errors(self):
        with Daemon() as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            self.assertTrue(r.ping())
            self.assertEqual(r.execute_command("CL.THROTTLE", "u", 15, 30, 60), [0, 16, 15, -1, 2])
            self.assertEqual(r.execute_command("CL.THROTTLE", "u", 15, 30, 60, 0),
                             [0, 16, 15, -1, 2])
            self.assertEqual(r.echo("hi"), b"hi")
            r.client_setname("worker-1")
            self.assertEqual(r.client_getname(), "worker-1")
            self.assertIsInstance(r.client_id(), int)
            # CLIENT HELP, which the error for an unknown subcommand names,
            # lists the subcommands there are.
            helped = b" ".join(r.execute_command("CLIENT", "HELP"))
            for sub in (b"GETNAME", b"ID", b"SETINFO", b"SETNAME"):
                self.assertIn(sub, helped)
            with self.assertRaisesRegex(redis.ResponseError, "Try CLIENT HELP"):
                r.execute_command("CLIENT", "KILL", "x")
            self.assertIn("connected_clients", r.info())
            self.assertIn("keys", r.info("limiter"))
            with self.assertRaisesRegex(redis.ResponseError, "Couldn't parse as integer: x"):
                r.execute_command("CL.THROTTLE", "u", "x", 30, 60)
            with self.assertRaisesRegex(redis.ResponseError, "Zero rates are not supported"):
                r.execute_command("CL.THROTTLE", "u", 1, 0, 60)
            with self.assertRaisesRegex(redis.ResponseError, "quantity must not be negative"):
                r.execute_command("CL.THROTTLE", "u", 1, 1, 60, -1)
            with self.assertRaisesRegex(redis.ResponseError,
                                        "Couldn't parse as integer: 9223372036854775808"):
                r.execute_command("CL.THROTTLE", "u", "9223372036854775808", 1, 1)
            with self.assertRaisesRegex(redis.ResponseError, "unknown command 'GET'"):
                r.get("x")
            # The connection survives every error above.
            self.assertTrue(r.ping())
            r.close()

    def test_pipeline_order(self):
        with Daemon() as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            p = r.pipeline(transaction=False)
            for _ in range(200):
                p.execute_command("CL.THROTTLE", "pipe", 99, 1, 3600)
            p.ping()
            res = p.execute()
            self.assertEqual(len(res), 201)
            self.assertTrue(res[200])
            # 100 allowed with remaining counting down in order, then limited.
            for i in range(100):
                self.assertEqual(res[i][0], 0)
                self.assertEqual(res[i][2], 99 - i)
            for i in range(100, 200):
                self.assertEqual(res[i][0], 1)
            r.close()

    def test_oversize_key_refused_connection_kept(self):
        with Daemon("--max-key-bytes", "16") as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            self.assertEqual(r.execute_command("CL.THROTTLE", "k" * 16, 1, 1, 1)[0], 0)
            with self.assertRaisesRegex(redis.ResponseError, "key too long"):
                r.execute_command("CL.THROTTLE", "k" * 17, 1, 1, 1)
            self.assertTrue(r.ping())
            self.assertEqual(int(r.info("limiter")["keys"]), 1)
            r.close()


class RawSocketTest(unittest.TestCase):
    def test_inline_and_pipelined_batch(self):
        with Daemon() as d:
            s = d.connect()
            s.sendall(b"PING\r\nping hello\r\n" + resp_command("ECHO", "x") * 3 +
                      b"CL.THROTTLE a 1 1 60\r\n")
            want = (b"+PONG\r\n$5\r\nhello\r\n" + b"$1\r\nx\r\n" * 3 +
                    b"*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:60\r\n")
            self.assertEqual(recv_exact(s, len(want)), want)
            s.sendall(b"QUIT\r\n")
            self.assertEqual(recv_all(s), b"+OK\r\n")
            s.close()

    def test_malformed_frame_gets_error_and_close(self):
        with Daemon() as d:
            for bad in [b"*1\r\n%4\r\nPING\r\n", b"*1\r\n$x\r\n", b"*1\r\n$4\r\nPINGxx",
                        b"*abc\r\n"]:
                s = d.connect()
                s.sendall(bad)
                reply = recv_all(s)
                self.assertTrue(reply.startswith(b"-ERR Protocol error"), reply)
                s.close()
            # The daemon still serves others.
            s = d.connect()
            s.sendall(b"PING\r\n")
            self.assertEqual(recv_exact(s, 7), b"+PONG\r\n")
            s.close()

    def test_oversize_request_closed(self):
        with Daemon("--max-request-bytes", "1024") as d:
            s = d.connect()
            s.sendall(resp_command("ECHO", "x" * 2000))
            reply = recv_all(s)
            self.assertEqual(reply, b"-ERR Protocol error: request too large\r\n")
            s.close()
            s = d.connect()
            s.sendall(b"x" * 1100)
            self.assertEqual(recv_all(s), b"-ERR Protocol error: too big inline request\r\n")
            s.close()

    def test_max_clients(self):
        with Daemon("--max-clients", "3") as d:
            # Fill the three slots.  The readiness probe's connection may not be
            # reaped yet, so a refused attempt is retried (bounded).
            held = []
            deadline = time.monotonic() + 10
            while len(held) < 3 and time.monotonic() < deadline:
                s = d.connect()
                try:
                    s.sendall(b"PING\r\n")
                    ok = recv_exact(s, 7) == b"+PONG\r\n"
                except OSError:
                    ok = False
                if ok:
                    held.append(s)
                else:
                    s.close()
                    time.sleep(0.05)
            self.assertEqual(len(held), 3)
            extra = d.connect()
            self.assertEqual(recv_all(extra), b"-ERR max number of clients reached\r\n")
            extra.close()
            # the operator sees the refusal in the log (one line a minute)
            deadline = time.monotonic() + 5
            while "refusing clients" not in d.logtext() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn("refusing clients: 3 connected is --max-clients", d.logtext())
            held[0].close()
            # A slot frees up once a client leaves (bounded wait for the close).
            deadline = time.monotonic() + 10
            while True:
                s = d.connect()
                try:
                    s.sendall(b"PING\r\n")
                    got = recv_until(s, b"\r\n")
                except OSError:  # rejected and closed before our PING arrived
                    got = b""
                s.close()
                if got == b"+PONG\r\n" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(got, b"+PONG\r\n")
            for s in held[1:]:
                s.close()

    def test_fd_limit_warns(self):
        # The soft limit is raised to the hard one at start; below
        # --max-clients plus the daemon's own descriptors it says so.
        tmp = tempfile.mkdtemp(prefix="sluice-fd-")
        try:
            def low():
                resource.setrlimit(resource.RLIMIT_NOFILE, (128, 256))
            p = subprocess.Popen([SLUICED, "--socket", os.path.join(tmp, "s.sock"),
                                  "--max-clients", "1000"], stderr=subprocess.PIPE, text=True,
                                 preexec_fn=low)
            try:
                wait_for_socket(os.path.join(tmp, "s.sock"), p)
            finally:
                p.terminate()
                err = p.communicate(timeout=20)[1]
            self.assertIn("file descriptor limit (256) is below --max-clients (1000)", err)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_2000_concurrent_clients(self):
        n = 2000
        if raise_fd_limit(n + 100) < n + 100:
            self.skipTest("file descriptor limit too low for %d clients" % n)
        with Daemon("--max-clients", "5000") as d:
            socks = []
            try:
                for _ in range(n):
                    socks.append(d.connect())
                for i, s in enumerate(socks):
                    s.sendall(resp_command("CL.THROTTLE", "c%d" % (i % 100), 1000, 1, 60))
                allowed = 0
                for s in socks:
                    reply = recv_until(s, b"\r\n" * 1, limit=4096)
                    while reply.count(b"\r\n") < 6:
                        more = s.recv(4096)
                        if not more:
                            break
                        reply += more
                    self.assertTrue(reply.startswith(b"*5\r\n:0\r\n"), reply)
                    allowed += 1
                self.assertEqual(allowed, n)
                info = redis.Redis(unix_socket_path=d.path).info("clients")
                self.assertGreaterEqual(info["connected_clients"], n)
            finally:
                for s in socks:
                    s.close()

    def test_slow_reader_does_not_block_others(self):
        with Daemon() as d:
            slow = d.connect()
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            # ~16 MiB of replies requested, never read.
            payload = resp_command("ECHO", "y" * 8000)
            slow.setblocking(False)
            sent = 0
            try:
                for _ in range(2000):
                    sent += slow.send(payload)
            except BlockingIOError:
                pass  # the server stopped reading from us: that is the point
            self.assertGreater(sent, 0)
            # Other clients are served throughout.
            fast = d.connect()
            for _ in range(100):
                fast.sendall(b"PING\r\n")
                self.assertEqual(recv_exact(fast, 7), b"+PONG\r\n")
            fast.close()
            # The slow client still gets its replies, in order, once it reads.
            slow.setblocking(True)
            slow.settimeout(20)
            head = recv_exact(slow, 7 + 8000 + 2)
            self.assertEqual(head, b"$8000\r\n" + b"y" * 8000 + b"\r\n")
            slow.close()


class LifecycleTest(unittest.TestCase):
    def test_sigterm_removes_socket_and_mode(self):
        # Root may hand the socket to any group; others only to their own.
        gid = 4242 if os.geteuid() == 0 else os.getgid()
        d = Daemon("--socket-mode", "0640", "--socket-group", str(gid)).start()
        try:
            self.assertEqual(stat.S_IMODE(os.stat(d.path).st_mode), 0o640)
            self.assertEqual(os.stat(d.path).st_gid, gid)
            self.assertTrue(stat.S_ISSOCK(os.stat(d.path).st_mode))
            self.assertEqual(d.stop(), 0, d.logtext())
            self.assertFalse(os.path.exists(d.path))
            self.assertIn("listening on", d.logtext())
        finally:
            d.close()

    def test_sigint_with_clients_connected(self):
        d = Daemon().start()
        try:
            held = [d.connect() for _ in range(5)]
            held[0].sendall(b"CL.THROTTLE k 1 1 1\r\n")
            self.assertTrue(recv_until(held[0], b"\r\n" * 1).startswith(b"*5"))
            held[1].sendall(b"*2\r\n$4\r\nECHO\r\n$10\r\nabc")  # half a command
            d.proc.send_signal(signal.SIGINT)
            self.assertEqual(d.proc.wait(timeout=20), 0, d.logtext())
            self.assertFalse(os.path.exists(d.path))
            for s in held:
                s.settimeout(10)
                recv_all(s)  # every client sees its connection closed
                s.close()
        finally:
            d.close()

    def test_stale_socket_replaced(self):
        tmp = tempfile.mkdtemp(prefix="sluice-it-")
        try:
            path = os.path.join(tmp, "s.sock")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)  # bound, never listening, closed: a stale file
            s.close()
            self.assertTrue(os.path.exists(path))
            with Daemon(socket_path=path, tmpdir=tmp) as d:
                c = d.connect()
                c.sendall(b"PING\r\n")
                self.assertEqual(recv_exact(c, 7), b"+PONG\r\n")
                c.close()
            self.assertIn("removed stale socket", d.logtext())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_second_daemon_refuses_live_socket(self):
        with Daemon() as d:
            out = subprocess.run([SLUICED, "--socket", d.path], capture_output=True, timeout=20)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn(b"another daemon is listening", out.stderr)
            # The first daemon is unaffected.
            c = d.connect()
            c.sendall(b"PING\r\n")
            self.assertEqual(recv_exact(c, 7), b"+PONG\r\n")
            c.close()

    def test_socket_path_too_long(self):
        tmp = tempfile.mkdtemp(prefix="sluice-it-")
        try:
            path = os.path.join(tmp, "x" * 120)
            out = subprocess.run([SLUICED, "--socket", path], capture_output=True, timeout=20)
            self.assertEqual(out.returncode, 1)
            self.assertIn(b"longer than", out.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_refuses_to_replace_regular_file(self):
        tmp = tempfile.mkdtemp(prefix="sluice-it-")
        try:
            path = os.path.join(tmp, "not-a-socket")
            with open(path, "w") as f:
                f.write("precious")
            out = subprocess.run([SLUICED, "--socket", path], capture_output=True, timeout=20)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn(b"not a socket", out.stderr)
            with open(path) as f:
                self.assertEqual(f.read(), "precious")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_max_keys_and_on_full(self):
        # Keys that stay limited for an hour fill a two-key table.
        for policy, third in (("deny", 1), ("allow", 0), ("evict", 0)):
            with Daemon("--max-keys", "2", "--on-full", policy) as d:
                r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
                for key in ("a", "b"):
                    self.assertEqual(r.execute_command("CL.THROTTLE", key, 0, 1, 3600)[0], 0)
                res = r.execute_command("CL.THROTTLE", "c", 0, 1, 3600)
                self.assertEqual(res[0], third, policy)
                self.assertLessEqual(int(r.info("limiter")["keys"]), 2)
                r.close()

    def test_bad_flags(self):
        for args in (["--on-full", "maybe"], ["--max-clients", "0"], ["--socket-mode", "999"],
                     ["--log-level", "loud"], ["--socket-group", "no-such-group"], ["--nope"]):
            out = subprocess.run([SLUICED] + args, capture_output=True, timeout=20)
            self.assertEqual(out.returncode, 2, args)
        out = subprocess.run([SLUICED, "--help"], capture_output=True, timeout=20)
        self.assertEqual(out.returncode, 0)
        for flag in (b"--socket", b"--socket-mode", b"--socket-group", b"--max-clients",
                     b"--max-request-bytes", b"--max-key-bytes", b"--max-keys", b"--on-full",
                     b"--log-level", b"--version"):
            self.assertIn(flag, out.stdout)


class SluicectlTest(unittest.TestCase):
    def test_exit_codes(self):
        with Daemon() as d:
            def ctl(*args, env=None):
                return subprocess.run([SLUICECTL] + list(args), capture_output=True,
                                      timeout=20, env=env)
            r = ctl("-s", d.path, "throttle", "k", "0", "1", "60")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, b"allowed  limit=1 remaining=0 retry_after=-1s "
                                       b"reset_after=60s\n")
            r = ctl("-s", d.path, "throttle", "k", "0", "1", "60")
            self.assertEqual(r.returncode, 1)
            self.assertTrue(r.stdout.startswith(b"limited  limit=1 remaining=0 retry_after=60s"))
            self.assertEqual(ctl("-s", d.path, "throttle", "k", "x", "1", "60").returncode, 2)
            self.assertEqual(ctl("-s", d.path, "throttle", "k").returncode, 2)
            r = ctl("-s", d.path, "ping")
            self.assertEqual((r.returncode, r.stdout), (0, b"PONG\n"))
            env = dict(os.environ, SLUICE_SOCKET=d.path)
            self.assertEqual(ctl("ping", env=env).returncode, 0)
            r = ctl("-s", d.path, "raw", "cl.throttle", "z", "1", "1", "1")
            self.assertEqual(r.stdout, b"1) (integer) 0\n2) (integer) 2\n3) (integer) 1\n"
                                       b"4) (integer) -1\n5) (integer) 1\n")
            self.assertIn(b"connected_clients:", ctl("-s", d.path, "info").stdout)
            self.assertEqual(ctl("-s", d.path + ".missing", "ping").returncode, 2)
            # keys: every key held, through SCAN; redis-py's scan_iter agrees.
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            p = r.pipeline(transaction=False)
            for i in range(300):
                p.execute_command("CL.THROTTLE", "user:%d" % i, 5, 1, 60)
            p.execute()
            want = {"user:%d" % i for i in range(300)} | {"k", "z"}
            out = ctl("-s", d.path, "keys")
            self.assertEqual(out.returncode, 0)
            self.assertEqual(set(out.stdout.decode().split()), want)
            self.assertEqual({k.decode() for k in r.scan_iter()}, want)
            out = ctl("-s", d.path, "keys", "user:1?")
            self.assertEqual(set(out.stdout.decode().split()), {"user:1%d" % i for i in range(10)})
            r.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
