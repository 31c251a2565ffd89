"""Crowds on the network listeners of a real sluiced: connections that hold
a slot without using it never lock a real client out, and what HTTP/2
streams hold counts in the one client memory budget.

  1. gRPC: more silent TCP connections than --grpc-max-connections (set in
     the config file) and a real gRPC client (python3-grpcio) still gets
     its answer: a newcomer closes the oldest silent connection.  The rest
     are closed 10 s after connecting (handshake deadline); both counted in
     INFO listeners and /metrics, and logged.
  2. gRPC: many connections each holding an unfinished HTTP/2 stream of
     60 KB: client_memory counts them, stays within --max-client-memory
     (the heaviest connections are closed), and a real call still works.
  3. HTTP: 300 connections (the default cap is 256) that pipeline /metrics
     requests and never read an answer: /health and /v1/throttle still
     answer, every time.
  4. A burst of 400 connects to each TCP listener (RESP and HTTP) while the
     loop is busy (stopped): the kernel completes every handshake into the
     accept queue instead of dropping SYNs past a short backlog (a dropped
     SYN costs the client a 1 s retransmission), and each is answered once
     the loop runs again.

Bounded: every crowd has a fixed size, every wait a deadline."""
import os
import re
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import Daemon, free_tcp_port  # noqa: E402

import rlsclient  # noqa: E402  (the generated gRPC client)
from rlsclient import HAVE_GRPC, METHOD  # noqa: E402

YAML = """\
domain: app
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 1000000
"""


def setUpModule():
    rlsclient.setup()


def tearDownModule():
    rlsclient.teardown()


def info(d, section="listeners"):
    """INFO section as a dict of ints (Daemon.info's text, parsed)."""
    out = {}
    for line in d.info(section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            if v.isdigit():
                out[k] = int(v)
    return out


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^sluice_%s (\d+)" % name, text, re.M)
    assert m, "no sluice_%s in /metrics" % name
    return int(m.group(1))


def rls_call(port, timeout=5.0):
    """One ShouldRateLimit on a fresh channel; returns overall_code."""
    return rlsclient.call_once(port, timeout=timeout)


def h2_frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def h2_unfinished_stream(port, body_bytes):
    """A connection with one POST stream whose gRPC message announces
    body_bytes and sends them all but never ends the stream."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    path = METHOD.encode()
    hpack = (b"\x83\x86" + b"\x04" + bytes([len(path)]) + path +  # POST, http, :path
             b"\x01\x01x" +                                       # :authority x
             b"\x0f\x10\x10application/grpc")                       # content-type
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
    out += h2_frame(1, 0x4, 1, hpack)  # HEADERS, END_HEADERS, no END_STREAM
    msg = b"\x00" + struct.pack(">I", body_bytes) + b"\x00" * body_bytes
    for i in range(0, len(msg) - 1, 16384):  # the last byte never comes
        out += h2_frame(0, 0, 1, msg[i:min(i + 16384, len(msg) - 1)])
    s.sendall(out)
    return s


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class GrpcCrowdTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-crowd-")
        self.cfgdir = os.path.join(self.tmp, "ratelimit")
        os.mkdir(self.cfgdir)
        with open(os.path.join(self.cfgdir, "app.yaml"), "w") as f:
            f.write(YAML)
        self.port = free_tcp_port()
        self.hport = free_tcp_port()
        self.conf = os.path.join(self.tmp, "sluice.conf")
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            s.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def daemon(self, conf, *args):
        with open(self.conf, "w") as f:
            f.write("[sluiced]\ngrpc = 127.0.0.1:%d\nhttp = 127.0.0.1:%d\n%s"
                    % (self.port, self.hport, conf))
        return Daemon("--config", self.conf, "--ratelimit-config", self.cfgdir, *args,
                      tmpdir=self.tmp)

    def test_silent_connections_do_not_lock_envoy_out(self):
        cap = 1024  # the default
        with self.daemon("") as d:
            self.assertEqual(rls_call(self.port), rlsclient.pb().RateLimitResponse.OK)
            for _ in range(cap + 40):
                self.socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=5))
            # Every slot is held by a silent connection: a real client's
            # connection must displace one, not be closed.
            for _ in range(5):
                self.assertEqual(rls_call(self.port), rlsclient.pb().RateLimitResponse.OK)
            i = info(d)
            self.assertGreaterEqual(i["grpc_evictions"], 40)
            self.assertLessEqual(i["grpc_connections"], cap)
            self.assertEqual(metric(self.hport, "rls_evictions_total"), i["grpc_evictions"])
            # The silent ones left are closed about 10 s after they came.
            deadline = time.time() + 20
            while info(d)["grpc_connections"] > 0 and time.time() < deadline:
                time.sleep(0.5)
            i = info(d)
            self.assertEqual(i["grpc_connections"], 0, i)
            self.assertGreater(i["grpc_timeouts"], 0)
            self.assertEqual(metric(self.hport, "rls_timeouts_total"), i["grpc_timeouts"])
            self.assertIn("gRPC listener: closed", d.logtext())
            print("ok: %d silent gRPC connections over a cap of %d: real calls answered, "
                  "%d evicted, %d closed at the handshake deadline"
                  % (cap + 40, cap, i["grpc_evictions"], i["grpc_timeouts"]))

    def test_cap_from_the_config_file(self):
        with self.daemon("grpc_max_connections = 8\n") as d:
            for _ in range(20):
                self.socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=5))
            self.assertEqual(rls_call(self.port), rlsclient.pb().RateLimitResponse.OK)
            wait = time.time() + 5
            while info(d)["grpc_evictions"] < 12 and time.time() < wait:
                time.sleep(0.1)
            self.assertGreaterEqual(info(d)["grpc_evictions"], 12)
            self.assertLessEqual(info(d)["grpc_connections"], 8)

    def test_unfinished_streams_count_in_the_client_budget(self):
        budget = 4 << 20
        with self.daemon("max_client_memory = %d\n" % budget) as d:
            for _ in range(120):  # 120 x 60 KB held, about twice the budget
                self.socks.append(h2_unfinished_stream(self.port, 60000))
            deadline = time.time() + 10
            while info(d).get("grpc_memory_disconnects", 0) < 10 and time.time() < deadline:
                time.sleep(0.2)
            # Then until the crowd has settled (no connection closed in the
            # last 0.3 s): read while the closes went on, client_memory was
            # over the budget by 148 KB (two or three streams) in about one
            # run of five on a loaded machine.
            last = -1
            while time.time() < deadline:
                now = info(d).get("grpc_memory_disconnects", 0)
                if now == last:
                    break
                last = now
                time.sleep(0.3)
            mem = info(d, "clients")["client_memory"]
            self.assertGreater(mem, budget // 4,
                               "the streams' bytes are not counted in client_memory")
            self.assertLessEqual(mem, budget)
            i = info(d)
            self.assertGreater(i["grpc_memory_disconnects"], 0, i)
            # The streams still arriving may close more connections between
            # the two reads: /metrics says what INFO said before or after.
            m = metric(self.hport, "rls_memory_disconnects_total")
            after = info(d)["grpc_memory_disconnects"]
            self.assertTrue(i["grpc_memory_disconnects"] <= m <= after,
                            "INFO %d then %d, /metrics %d"
                            % (i["grpc_memory_disconnects"], after, m))
            self.assertEqual(rls_call(self.port), rlsclient.pb().RateLimitResponse.OK)
            print("ok: 120 unfinished 60 KB streams: client_memory %d within %d, "
                  "%d gRPC connections closed, heaviest first"
                  % (mem, budget, i["grpc_memory_disconnects"]))


class HttpCrowdTest(unittest.TestCase):
    def test_pipeliners_that_never_read_do_not_keep_health_failing(self):
        port = free_tcp_port()
        crowd = []
        with Daemon("--http", "127.0.0.1:%d" % port) as d:
            req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50
            for _ in range(300):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                s.settimeout(5)
                s.connect(("127.0.0.1", port))
                s.setblocking(False)
                crowd.append(s)
            # Each pipelines until the daemon stops reading it (its answers
            # are not read), bounded in bytes and time.
            deadline = time.time() + 20
            for s in crowd:
                sent = 0
                while sent < (4 << 20) and time.time() < deadline:
                    try:
                        sent += s.send(req)
                    except BlockingIOError:
                        break
                    except OSError:
                        break  # closed by the daemon
            for n in range(10):
                t0 = time.time()
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port,
                                            timeout=3) as r:
                    self.assertEqual(r.status, 200)
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d/v1/throttle?key=k&burst=1000&count=1000&period=1"
                        % port, timeout=3) as r:
                    self.assertEqual(r.status, 200)
                self.assertLess(time.time() - t0, 3)
            i = info(d)
            self.assertGreater(i["http_evictions"], 0)
            self.assertLessEqual(i["http_connections"], 256 + 2)
            self.assertEqual(metric(port, "http_evictions_total"), info(d)["http_evictions"])
            # The /metrics answers the crowd asked for may wait for later
            # turns, /health's never; both sides count them.  How many
            # wait is timing (a turn's answers must take 1 ms, a render
            # more than 50 us: 0 in about 1 run in 12 here), so it is
            # printed, not asserted; what a user sees, /health answered
            # at once through the crowd, is asserted above.
            m = metric(port, "http_deferred_total")
            self.assertTrue(i["http_deferred"] <= m <= info(d)["http_deferred"], m)
            print("ok: 300 pipelining connections that never read: /health and /v1/throttle "
                  "answered 10 of 10, %d connections evicted, %d /metrics answers deferred"
                  % (i["http_evictions"], i["http_deferred"]))
            for s in crowd:
                s.close()


class BacklogTest(unittest.TestCase):
    N = 400

    def connect_burst(self, port):
        """N non-blocking connects to port; returns (the sockets, how many
        completed their handshake within 1 s)."""
        socks, done = [], set()
        for _ in range(self.N):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        deadline = time.monotonic() + 1.0
        pending = {s.fileno(): s for s in socks}
        while pending and time.monotonic() < deadline:
            _, w, _ = select.select([], list(pending), [], 0.1)
            for fd in w:
                if pending[fd].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    done.add(fd)
                del pending[fd]
        return socks, len(done)

    def test_connect_burst_while_the_loop_is_busy(self):
        try:
            with open("/proc/sys/net/core/somaxconn") as f:
                somaxconn = int(f.read())
        except (OSError, ValueError):
            somaxconn = 0
        if somaxconn <= self.N:
            self.skipTest("net.core.somaxconn is %d: the kernel caps every backlog there"
                          % somaxconn)
        rport, hport = free_tcp_port(), free_tcp_port()
        with Daemon("--listen", "127.0.0.1:%d" % rport, "--http", "127.0.0.1:%d" % hport) as d:
            os.kill(d.proc.pid, signal.SIGSTOP)
            bursts = {}
            try:
                for name, port in (("RESP", rport), ("HTTP", hport)):
                    bursts[name] = self.connect_burst(port)
            finally:
                os.kill(d.proc.pid, signal.SIGCONT)
            for name, (socks, done) in bursts.items():
                # A backlog of 128 completed 129 of them.
                self.assertEqual(done, self.N, "%s: %d of %d connects completed while the "
                                 "loop was stopped" % (name, done, self.N))
            # Once the loop runs again, the connections are served: the
            # last one of each burst gets its answer.
            r = bursts["RESP"][0][-1]
            r.setblocking(True)
            r.settimeout(5)
            r.sendall(b"PING\r\n")
            self.assertEqual(r.recv(64), b"+PONG\r\n")
            h = bursts["HTTP"][0][-1]
            h.setblocking(True)
            h.settimeout(5)
            h.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertTrue(h.recv(64).startswith(b"HTTP/1.1 200"))
            for socks, _ in bursts.values():
                for s in socks:
                    s.close()
            print("ok: %d connects to each TCP listener while its loop was stopped: all "
                  "completed, then answered" % self.N)


if __name__ == "__main__":
    unittest.main(verbosity=2)
