#!/usr/bin/python3
"""Graceful drain on SIGTERM (--shutdown-drain / shutdown_drain), on a real
sluiced serving the Unix socket, HTTP and Envoy's rate limit service:

  1. with a drain period, SIGTERM turns the node not ready at once: the
     gRPC health service's Check says NOT_SERVING, an open Watch stream
     hears NOT_SERVING, /ready answers 503 "draining" and INFO's
     cluster_state says so, while /health (liveness), ShouldRateLimit
     (on open and new connections) and CL.THROTTLE on the socket still
     answer; once the drain period is over the daemon exits 0 and removes
     its socket;
  2. a second SIGTERM, or a SIGINT, during a long drain exits at once;
     a SIGINT without a preceding SIGTERM exits at once too;
  3. the config file's shutdown_drain does what the flag does; without
     either, SIGTERM exits at once (the default, 0).

Every wait is bounded; every process is stopped at the end.
"""
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlsclient  # noqa: E402
import sluicetest  # noqa: E402

YAML = """domain: app
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
"""
SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"


def setUpModule():
    rlsclient.setup()


def tearDownModule():
    rlsclient.teardown()


def get(port, path):
    """(status, body) of GET path."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def throttle(d, key="k"):
    """One CL.THROTTLE on the Unix socket: its raw reply."""
    s = d.connect()
    try:
        s.sendall(sluicetest.resp_command("CL.THROTTLE", key, 100, 1000, 60, 1))
        data = b""
        while data.count(b"\r\n") < 6:  # *5 and its five integers
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


class Node:
    """sluiced with --grpc, --http and a rate limit config, in a fresh
    directory; extra arguments (the drain) as given."""

    def __init__(self, *args, conf=None):
        self.tmp = tempfile.mkdtemp(prefix="sluice-drain-")
        cfgdir = os.path.join(self.tmp, "rl")
        os.mkdir(cfgdir)
        with open(os.path.join(cfgdir, "app.yaml"), "w") as f:
            f.write(YAML)
        self.grpc = sluicetest.free_tcp_port()
        self.http = sluicetest.free_tcp_port()
        extra = list(args)
        if conf is not None:
            path = os.path.join(self.tmp, "sluice.conf")
            with open(path, "w") as f:
                f.write(conf)
            extra += ["--config", path]
        self.d = sluicetest.Daemon("--grpc", "127.0.0.1:%d" % self.grpc, "--http",
                                   "127.0.0.1:%d" % self.http, "--ratelimit-config", cfgdir,
                                   *extra, tmpdir=self.tmp)

    def __enter__(self):
        self.d.start()
        self.chan, self.call = rlsclient.connect(self.grpc)
        self.check = self.chan.unary_unary("/grpc.health.v1.Health/Check",
                                           request_serializer=lambda b: b,
                                           response_deserializer=lambda b: b)
        self.watch = self.chan.unary_stream("/grpc.health.v1.Health/Watch",
                                            request_serializer=lambda b: b,
                                            response_deserializer=lambda b: b)
        return self

    def __exit__(self, *exc):
        self.chan.close()
        self.d.close()  # kills what is left
        shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    def decide(self):
        return self.call(rlsclient.request("app", [("user", "u1")]), timeout=5).overall_code

    def signal(self, sig):
        self.d.proc.send_signal(sig)

    def exited(self, timeout):
        """The exit status once the daemon is gone (fails after timeout)."""
        return self.d.proc.wait(timeout=timeout)


@unittest.skipUnless(rlsclient.HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class DrainTest(unittest.TestCase):

    def test_sigterm_drains_then_exits(self):
        OK = rlsclient.pb().RateLimitResponse.OK
        drain = 4
        with Node("--shutdown-drain", str(drain)) as n:
            self.assertEqual(get(n.http, "/ready")[0], 200)
            self.assertEqual(n.check(b"", timeout=5), SERVING)
            w = n.watch(b"\x0a\x09ratelimit", timeout=60)
            self.assertEqual(next(w), SERVING)
            self.assertEqual(n.decide(), OK)
            n.signal(signal.SIGTERM)
            # The open watch hears it first, then every probe says so.
            self.assertEqual(next(w), NOT_SERVING)
            self.assertEqual(n.check(b"", timeout=5), NOT_SERVING)
            status, body = get(n.http, "/ready")
            self.assertEqual(status, 503)
            self.assertIn("draining", body)
            self.assertIn("cluster_state_reason:draining", n.d.info("cluster"))
            # Still answering: liveness, decisions on the open connection,
            # on a new one, and on the socket.
            self.assertEqual(get(n.http, "/health")[0], 200)
            self.assertEqual(n.decide(), OK)
            self.assertEqual(rlsclient.call_once(n.grpc, domain="app"), OK)
            reply = throttle(n.d)
            self.assertTrue(reply.startswith(b"*5\r\n:0\r\n"), reply)
            self.assertIsNone(n.d.proc.poll(), "exited before its drain period was over")
            # Then it exits, cleanly, and removes its socket.
            self.assertEqual(n.exited(timeout=drain + 20), 0, n.d.logtext())
            self.assertFalse(os.path.exists(n.d.path))
            self.assertIn("drain period over", n.d.logtext())

    def test_second_signal_exits_at_once(self):
        for second in (signal.SIGTERM, signal.SIGINT):
            with Node("--shutdown-drain", "1h") as n:
                n.signal(signal.SIGTERM)
                sluicetest.wait_until(lambda: get(n.http, "/ready")[0] == 503, timeout=10,
                                      what="not ready after SIGTERM")
                self.assertIsNone(n.d.proc.poll())
                n.signal(second)
                self.assertEqual(n.exited(timeout=20), 0, n.d.logtext())
                self.assertFalse(os.path.exists(n.d.path))
        # SIGINT alone (a person at a terminal) does not drain.
        with Node("--shutdown-drain", "1h") as n:
            n.signal(signal.SIGINT)
            self.assertEqual(n.exited(timeout=20), 0, n.d.logtext())

    def test_config_file_and_default(self):
        with Node(conf="[sluiced]\nshutdown_drain = 1h\n") as n:
            n.signal(signal.SIGTERM)
            sluicetest.wait_until(lambda: n.check(b"", timeout=5) == NOT_SERVING, timeout=10,
                                  what="NOT_SERVING after SIGTERM")
            self.assertEqual(n.decide(), rlsclient.pb().RateLimitResponse.OK)
            n.signal(signal.SIGTERM)
            self.assertEqual(n.exited(timeout=20), 0, n.d.logtext())
        # The flag overrides the file; 0 (the default) exits at once.
        with Node("--shutdown-drain", "0", conf="[sluiced]\nshutdown_drain = 1h\n") as n:
            n.signal(signal.SIGTERM)
            self.assertEqual(n.exited(timeout=20), 0, n.d.logtext())
            self.assertNotIn("draining", n.d.logtext())

    def test_bad_values_refused(self):
        for bad in ("-1", "2h", "soon"):
            d = sluicetest.Daemon("--shutdown-drain", bad)
            try:
                d.start(wait=False)
                self.assertEqual(d.proc.wait(timeout=20), 2, bad)
                self.assertIn("--shutdown-drain", d.logtext())
            finally:
                d.close()


if __name__ == "__main__":
    unittest.main()
