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
