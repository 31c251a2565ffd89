"""The optional TCP listener for the Redis protocol (--listen): the same
commands and state as the Unix socket, redis-py over TCP (pipelines and
transactions), and requirepass: TCP clients get NOAUTH until AUTH (or HELLO
AUTH) with the password, Unix socket clients need none, and binding beyond
loopback without a password is refused at start.  Sends only to 127.0.0.1."""
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402
from sluicetest import SLUICED, Daemon, free_tcp_port  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class TcpListener(unittest.TestCase):
    def setUp(self):
        self.port = free_tcp_port()

    def test_loopback_without_password(self):
        with Daemon("--listen", "127.0.0.1:%d" % self.port) as d:
            t = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)
            u = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            self.assertTrue(t.ping())
            # One state: a key drawn from TCP and from the Unix socket.
            self.assertEqual(t.execute_command("CL.THROTTLE", "k", 1, 1, 60)[0], 0)
            self.assertEqual(u.execute_command("CL.THROTTLE", "k", 1, 1, 60)[0], 0)
            self.assertEqual(t.execute_command("CL.THROTTLE", "k", 1, 1, 60)[0], 1)
            p = t.pipeline()  # a MULTI/EXEC transaction, redis-py's default
            p.execute_command("CL.THROTTLE", "p", 5, 1, 60)
            p.execute_command("SL.THROTTLE", "q", "ALGO", "gcra", "RATE", 1, 1000)
            self.assertEqual([r[0] for r in p.execute()], [0, 0])
            t.close()
            u.close()

    def test_requirepass(self):
        with tempfile.TemporaryDirectory() as tmp:
            pw = os.path.join(tmp, "pass")
            with open(pw, "w") as f:
                f.write("s3cret\n")
            with Daemon("--listen", "127.0.0.1:%d" % self.port, "--requirepass-file", pw) as d:
                anon = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)
                with self.assertRaises(redis.AuthenticationError):
                    anon.ping()
                with self.assertRaises(redis.AuthenticationError):
                    anon.execute_command("CL.THROTTLE", "k", 1, 1, 60)
                anon.close()
                bad = redis.Redis(host="127.0.0.1", port=self.port, password="nope",
                                  socket_timeout=10)
                with self.assertRaises(redis.ResponseError) as cm:  # WRONGPASS
                    bad.ping()
                self.assertIn("WRONGPASS", str(cm.exception))
                bad.close()
                good = redis.Redis(host="127.0.0.1", port=self.port, password="s3cret",
                                   socket_timeout=10)
                self.assertTrue(good.ping())
                self.assertEqual(good.execute_command("CL.THROTTLE", "k", 1, 1, 60)[0], 0)
                good.close()
                # HELLO 3 AUTH default PASS, as RESP3 clients log in (a wrong
                # password leaves the connection as it was).
                with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
                    s.sendall(resp("HELLO", "3", "AUTH", "default", "nope"))
                    self.assertTrue(s.recv(4096).startswith(b"-WRONGPASS"))
                    s.sendall(resp("PING"))
                    self.assertTrue(s.recv(4096).startswith(b"-NOAUTH"))
                    s.sendall(resp("HELLO", "3", "AUTH", "default", "s3cret"))
                    self.assertTrue(s.recv(4096).startswith(b"%7"))
                    s.sendall(resp("PING"))
                    self.assertEqual(s.recv(4096), b"+PONG\r\n")
                # The Unix socket's permissions are its gate: no AUTH there.
                u = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
                self.assertTrue(u.ping())
                u.close()

    def test_unusable_password_file_refused(self):
        """An empty, newline-only or NUL-first file used to turn AUTH off
        while the log said "AUTH required" (and passed the guard against a
        non-loopback listener): now sluiced refuses to start."""
        with tempfile.TemporaryDirectory() as tmp:
            for name, data, why in [("empty", b"", "empty"), ("newline", b"\n", "empty"),
                                    ("crlf", b"\r\nsecond\n", "empty"),
                                    ("nul", b"\0secret\n", "NUL"), ("long", b"x" * 600, "512")]:
                pw = os.path.join(tmp, name)
                with open(pw, "wb") as f:
                    f.write(data)
                p = subprocess.run([SLUICED, "--socket", os.path.join(tmp, "s.sock"), "--listen",
                                    "0.0.0.0:%d" % self.port, "--requirepass-file", pw],
                                   capture_output=True, text=True, timeout=20)
                self.assertEqual(p.returncode, 2, (name, p.stderr))
                self.assertIn(why, p.stderr, name)
                self.assertFalse(os.path.exists(os.path.join(tmp, "s.sock")), name)

    def test_first_line_only_and_hello_before_auth(self):
        with tempfile.TemporaryDirectory() as tmp:
            pw = os.path.join(tmp, "pass")
            with open(pw, "w") as f:
                f.write("s3cret\nnot-the-password\n")
            with Daemon("--listen", "127.0.0.1:%d" % self.port, "--requirepass-file", pw):
                with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
                    s.sendall(resp("AUTH", "s3cret\nnot-the-password"))
                    self.assertTrue(s.recv(4096).startswith(b"-WRONGPASS"))
                    # HELLO without AUTH: no server info, no name taken
                    for hello in [("HELLO",), ("HELLO", "3"), ("HELLO", "2", "SETNAME", "x"),
                                  ("HELLO", "3", "SETNAME", "AUTH")]:
                        s.sendall(resp(*hello))
                        got = s.recv(4096)
                        self.assertTrue(got.startswith(b"-NOAUTH"), (hello, got))
                        self.assertNotIn(b"sluice", got)
                    s.sendall(resp("INFO"))
                    self.assertTrue(s.recv(4096).startswith(b"-NOAUTH"))
                    s.sendall(resp("AUTH", "s3cret"))
                    self.assertEqual(s.recv(4096), b"+OK\r\n")
                    s.sendall(resp("CLIENT", "GETNAME"))
                    self.assertEqual(s.recv(4096), b"$-1\r\n")  # HELLO SETNAME took nothing
                    s.sendall(resp("HELLO", "2"))
                    self.assertTrue(s.recv(4096).startswith(b"*14"))
                    s.sendall(resp("QUIT"))
                    self.assertEqual(s.recv(4096), b"+OK\r\n")

    def test_silent_tcp_crowd_locks_nobody_out(self):
        """Silent unauthenticated TCP connections used to take every
        --max-clients slot, the Unix socket's included.  Now TCP has its own
        cap, a newcomer displaces the oldest unauthenticated connection
        instead of being refused, and those that never AUTH are closed after
        10 s, with a log line."""
        with tempfile.TemporaryDirectory() as tmp:
            pw = os.path.join(tmp, "pass")
            with open(pw, "w") as f:
                f.write("s3cret\n")
            with Daemon("--listen", "127.0.0.1:%d" % self.port, "--requirepass-file", pw,
                        "--max-clients", "20", "--max-tcp-clients", "50") as d:
                crowd = []
                try:
                    for _ in range(200):
                        crowd.append(socket.create_connection(("127.0.0.1", self.port),
                                                              timeout=10))
                    # the local application still gets in
                    u = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
                    self.assertTrue(u.ping())
                    # and so does a real TCP client, which then outranks the crowd
                    good = redis.Redis(host="127.0.0.1", port=self.port, password="s3cret",
                                       socket_timeout=10)
                    self.assertTrue(good.ping())
                    for _ in range(100):
                        crowd.append(socket.create_connection(("127.0.0.1", self.port),
                                                              timeout=10))
                    self.assertEqual(good.execute_command("CL.THROTTLE", "k", 1, 1, 60)[0], 0)
                    info = u.info()
                    self.assertLessEqual(info["connected_clients"], 20 + 50, info)
                    sluicetest.wait_until(lambda: "TCP listener: closed" in d.logtext(),
                                          what="the eviction log line")
                    # the survivors never AUTH: closed at their deadline
                    last = crowd[-1]
                    last.settimeout(20)
                    self.assertEqual(last.recv(100), b"")
                    self.assertTrue(good.ping())
                    good.close()
                    u.close()
                finally:
                    for c in crowd:
                        c.close()

    def test_beyond_loopback_needs_a_password(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([SLUICED, "--socket", os.path.join(tmp, "s.sock"), "--listen",
                                "0.0.0.0:%d" % self.port], capture_output=True, text=True,
                               timeout=20)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("not a loopback address", p.stderr)
            conf = os.path.join(tmp, "c.conf")
            with open(conf, "w") as f:
                f.write("[sluiced]\nlisten = 0.0.0.0:%d\nrequirepass = s3cret\n" % self.port)
            with Daemon("--config", conf):
                r = redis.Redis(host="127.0.0.1", port=self.port, password="s3cret",
                                socket_timeout=10)
                self.assertTrue(r.ping())
                r.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
