"""The per-turn budgets of a real sluiced keep a well-behaved client
answered while a hostile one floods the daemon (README, "No client can make
a turn long").

  1. gRPC input: hostile connections send HTTP/2 input as fast as loopback
     takes it (frames of an unknown type, which HTTP/2 says to ignore: no
     answer, nothing held, only nghttp2's parsing).  Meanwhile a real gRPC
     client on its own connection keeps calling ShouldRateLimit: every call
     is answered, many within the flood, and the reads held over the turn's
     256 KiB are counted (grpc_deferred_reads, sluice_rls_deferred_reads_total).
     The daemon is paused (SIGSTOP) for 100 ms every half second, as a
     loaded host would stall it: the flood piles up in the sockets, and the
     turn after each pause finds far more than 256 KiB to read.
  2. Closing clients that hung up: rounds of 1,000 Unix socket clients
     hanging up together (the daemon is paused with SIGSTOP while they
     close, so their hang-ups reach it in one loop turn, as after a stall or
     a crashed client pool).  Meanwhile a real client keeps calling
     CL.THROTTLE: every call is answered, every hung-up client is closed in
     the end, and those past the turn's 64 closes are counted
     (deferred_closes, sluice_deferred_closes_total).
  3. The same on the gRPC listener: 1,000 connections hanging up together
     (each closed frees an HTTP/2 session), a real gRPC client answered,
     every one closed in the end, those past the turn's 64 counted
     (grpc_deferred_closes, sluice_rls_deferred_closes_total).
  4. The same on the HTTP listener: 1,000 connections (half of them after
     a keep-alive request answered, half silent) hanging up together, a
     real HTTP client on its own keep-alive connection answered, every one
     closed, those past the turn's 64 counted (http_deferred_closes,
     sluice_http_deferred_closes_total).

Each would fail without its budget: its counter would stay at 0.  Bounded:
every crowd has a fixed size, every loop a deadline; no latency is asserted
beyond a generous per-call timeout (timing belongs in the benchmarks)."""
import os
import re
import resource
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import http.client
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import Daemon, free_tcp_port, recv_until, resp_command  # noqa: E402

import rlsclient  # noqa: E402  (the generated gRPC client)
from rlsclient import HAVE_GRPC  # noqa: E402

YAML = """\
domain: app
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 1000000
"""

FLOOD_CONNS = 24        # hostile gRPC connections
FLOOD_SECONDS = 4.0     # how long they flood
FLOOD_MAX_BYTES = 256 << 20  # and at most this much each
CALL_TIMEOUT = 3.0      # a real call's deadline: generous, not a latency goal
CLOSE_CROWD = 1000      # Unix socket clients hanging up together, per round
CLOSE_ROUNDS = 2


def setUpModule():
    rlsclient.setup()


def tearDownModule():
    rlsclient.teardown()


def info_ints(d, section):
    out = {}
    for line in d.info(section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            if v.strip().isdigit():
                out[k] = int(v)
    return out


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^sluice_%s (\d+)" % name, text, re.M)
    assert m, "no sluice_%s in /metrics" % name
    return int(m.group(1))


def http_answer(sock):
    """One HTTP/1.1 answer read whole from sock (head and Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?im)^content-length: *(\d+)", head)
    want = int(m.group(1)) if m else 0
    while len(body) < want:
        chunk = sock.recv(4096)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def h2_frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def pauser(pid, stop, pauses):
    """Stalls the daemon 100 ms every 500 ms until stop is set."""
    while not stop.wait(0.4):
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(0.1)
        finally:
            os.kill(pid, signal.SIGCONT)
        pauses[0] += 1


def flooder(port, stop, sent, idx):
    """One hostile connection: the preface, then frames of an unknown type
    (0xfa, 16 KiB each) until stop is set, the deadline or the byte cap."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        return
    s.settimeout(0.5)
    junk = h2_frame(0xfa, 0, 0, b"\x00" * 16384) * 4
    deadline = time.time() + FLOOD_SECONDS + 10
    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b""))
        while not stop.is_set() and time.time() < deadline and sent[idx] < FLOOD_MAX_BYTES:
            try:
                sent[idx] += s.send(junk)
            except socket.timeout:
                continue
            try:  # the SETTINGS and their ACK, never much
                s.recv(65536, socket.MSG_DONTWAIT)
            except (BlockingIOError, socket.timeout):
                pass
    except OSError:
        pass  # closed by the daemon
    finally:
        s.close()


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class GrpcInputBudgetTest(unittest.TestCase):
    def test_real_client_answered_during_an_http2_input_flood(self):
        tmp = tempfile.mkdtemp(prefix="sluice-budget-")
        try:
            cfgdir = os.path.join(tmp, "ratelimit")
            os.mkdir(cfgdir)
            with open(os.path.join(cfgdir, "app.yaml"), "w") as f:
                f.write(YAML)
            port, hport = free_tcp_port(), free_tcp_port()
            with Daemon("--grpc", "127.0.0.1:%d" % port, "--http", "127.0.0.1:%d" % hport,
                        "--ratelimit-config", cfgdir, tmpdir=tmp) as d:
                self.run_flood(d, port, hport)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def run_flood(self, d, port, hport):
        import grpc
        pb = rlsclient.pb()
        chan, call = rlsclient.connect(port)
        try:
            req = rlsclient.request("app", [("user", "u1")])
            self.assertEqual(call(req, timeout=CALL_TIMEOUT).overall_code, pb.RateLimitResponse.OK)
            before = info_ints(d, "listeners")["grpc_deferred_reads"]
            stop = threading.Event()
            sent = [0] * FLOOD_CONNS
            pauses = [0]
            threads = [threading.Thread(target=flooder, args=(port, stop, sent, i), daemon=True)
                       for i in range(FLOOD_CONNS)]
            threads.append(threading.Thread(target=pauser, args=(d.proc.pid, stop, pauses),
                                            daemon=True))
            for t in threads:
                t.start()
            answered, failed = 0, []
            end = time.time() + FLOOD_SECONDS
            try:
                while time.time() < end and answered < 100000:
                    try:
                        r = call(req, timeout=CALL_TIMEOUT)
                        self.assertEqual(r.overall_code, pb.RateLimitResponse.OK)
                        answered += 1
                    except grpc.RpcError as e:
                        failed.append(e.code())
                during = info_ints(d, "listeners")["grpc_deferred_reads"] - before
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=15)
            flood_mb = sum(sent) / 1e6
            self.assertEqual(failed, [], "real calls failed during the flood")
            # Answered within the flood, not only after it: a few a second
            # at least (hundreds on an idle host).
            self.assertGreaterEqual(answered, 10, "%d calls in %.0f s beside %.0f MB of input"
                                    % (answered, FLOOD_SECONDS, flood_mb))
            # The flood was over the turn's budget: reads held for the next turns.
            self.assertGreater(during, 0, "no read was held over the turn's 256 KiB "
                               "(%.0f MB sent)" % flood_mb)
            i = info_ints(d, "listeners")
            self.assertLessEqual(i["grpc_deferred_reads"], metric(hport, "rls_deferred_reads_total"))
            self.assertEqual(call(req, timeout=CALL_TIMEOUT).overall_code, pb.RateLimitResponse.OK)
            st = info_ints(d, "stats")
            print("ok: %d hostile connections sent %.0f MB of HTTP/2 input in %.0f s (%d "
                  "pauses); a real client's %d calls answered, none failed; %d reads held for "
                  "a later turn (longest turn %d us, %d us of CPU)"
                  % (FLOOD_CONNS, flood_mb, FLOOD_SECONDS, pauses[0], answered, during,
                     st.get("loop_max_turn_us", -1), st.get("loop_max_turn_cpu_us", -1)))
        finally:
            chan.close()


def raise_nofile(test, want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            test.skipTest("RLIMIT_NOFILE hard limit %d < %d" % (hard, want))
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class GrpcCloseBudgetTest(unittest.TestCase):
    def setUp(self):
        raise_nofile(self, CLOSE_CROWD + 200)

    def test_real_client_answered_while_grpc_crowds_hang_up(self):
        tmp = tempfile.mkdtemp(prefix="sluice-budget-")
        try:
            cfgdir = os.path.join(tmp, "ratelimit")
            os.mkdir(cfgdir)
            with open(os.path.join(cfgdir, "app.yaml"), "w") as f:
                f.write(YAML)
            port, hport = free_tcp_port(), free_tcp_port()
            with Daemon("--grpc", "127.0.0.1:%d" % port, "--http", "127.0.0.1:%d" % hport,
                        "--ratelimit-config", cfgdir, tmpdir=tmp) as d:
                self.run_rounds(d, port, hport)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def run_rounds(self, d, port, hport):
        pb = rlsclient.pb()
        chan, call = rlsclient.connect(port)
        req = rlsclient.request("app", [("user", "u1")])
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
        try:
            self.assertEqual(call(req, timeout=CALL_TIMEOUT).overall_code, pb.RateLimitResponse.OK)
            base = info_ints(d, "listeners")["grpc_connections"]
            answered = 0
            for rnd in range(CLOSE_ROUNDS):
                crowd = []
                for k in range(CLOSE_CROWD):
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    if k % 2:
                        s.sendall(preface)  # half of them greeted, half silent
                    crowd.append(s)
                wait = time.time() + 20
                while (info_ints(d, "listeners")["grpc_connections"] < base + CLOSE_CROWD
                       and time.time() < wait):
                    time.sleep(0.05)
                os.kill(d.proc.pid, signal.SIGSTOP)
                try:
                    for s in crowd:
                        s.close()
                finally:
                    os.kill(d.proc.pid, signal.SIGCONT)
                for _ in range(20):
                    self.assertEqual(call(req, timeout=CALL_TIMEOUT).overall_code,
                                     pb.RateLimitResponse.OK)
                    answered += 1
                wait = time.time() + 20
                while (info_ints(d, "listeners")["grpc_connections"] > base
                       and time.time() < wait):
                    self.assertEqual(call(req, timeout=CALL_TIMEOUT).overall_code,
                                     pb.RateLimitResponse.OK)
                    answered += 1
                    time.sleep(0.01)
                self.assertEqual(info_ints(d, "listeners")["grpc_connections"], base,
                                 "round %d: hung-up connections left open" % rnd)
            i = info_ints(d, "listeners")
            self.assertEqual(i["grpc_evictions"], 0, i)  # all closed as hung up
            self.assertGreater(i["grpc_deferred_closes"], 0, i)
            self.assertEqual(metric(hport, "rls_deferred_closes_total"),
                             info_ints(d, "listeners")["grpc_deferred_closes"])
            st = info_ints(d, "stats")
            print("ok: %d rounds of %d gRPC connections hanging up at once: a real client's %d "
                  "calls answered, every one closed, %d closed at a later turn (longest turn "
                  "%d us, %d us of CPU)"
                  % (CLOSE_ROUNDS, CLOSE_CROWD, answered, i["grpc_deferred_closes"],
                     st.get("loop_max_turn_us", -1), st.get("loop_max_turn_cpu_us", -1)))
        finally:
            chan.close()


class HttpCloseBudgetTest(unittest.TestCase):
    def setUp(self):
        raise_nofile(self, CLOSE_CROWD + 200)

    def test_real_client_answered_while_http_crowds_hang_up(self):
        hport = free_tcp_port()
        with Daemon("--http", "127.0.0.1:%d" % hport,
                    "--http-max-connections", str(CLOSE_CROWD + 100)) as d:
            good = http.client.HTTPConnection("127.0.0.1", hport, timeout=CALL_TIMEOUT)

            def ask():
                good.request("GET", "/health")
                r = good.getresponse()
                body = r.read()
                self.assertEqual(r.status, 200, body)

            def conns():
                return info_ints(d, "listeners")["http_connections"]

            ask()
            base = conns()
            request = b"GET /health HTTP/1.1\r\nHost: sluice\r\n\r\n"
            answered = 0
            deadline = time.time() + 120
            for rnd in range(CLOSE_ROUNDS):
                self.assertLess(time.time(), deadline)
                crowd = []
                for k in range(CLOSE_CROWD):
                    s = socket.create_connection(("127.0.0.1", hport), timeout=5)
                    if k % 2:  # half of them idle after an answer, half silent
                        s.sendall(request)
                        self.assertTrue(http_answer(s).startswith(b"HTTP/1.1 200"))
                    crowd.append(s)
                wait = time.time() + 20
                while conns() < base + CLOSE_CROWD and time.time() < wait:
                    time.sleep(0.05)
                self.assertEqual(conns(), base + CLOSE_CROWD, "round %d: not all connected" % rnd)
                # Paused while they all hang up: one turn sees every hang-up.
                os.kill(d.proc.pid, signal.SIGSTOP)
                try:
                    for s in crowd:
                        s.close()
                finally:
                    os.kill(d.proc.pid, signal.SIGCONT)
                for _ in range(50):
                    ask()
                    answered += 1
                wait = time.time() + 20
                while conns() > base and time.time() < wait:
                    ask()
                    answered += 1
                    time.sleep(0.01)
                self.assertEqual(conns(), base, "round %d: hung-up connections left open" % rnd)
            i = info_ints(d, "listeners")
            self.assertEqual(i["http_evictions"], 0, i)  # all closed as hung up
            self.assertEqual(i["http_timeouts"], 0, i)
            # Past 64 a turn, the hang-ups were closed at the next turns.
            self.assertGreater(i["http_deferred_closes"], 0, i)
            self.assertEqual(metric(hport, "http_deferred_closes_total"),
                             info_ints(d, "listeners")["http_deferred_closes"])
            good.close()
            st = info_ints(d, "stats")
            print("ok: %d rounds of %d HTTP connections hanging up at once: a real client's %d "
                  "requests answered, every one closed, %d closed at a later turn (longest turn "
                  "%d us, %d us of CPU)"
                  % (CLOSE_ROUNDS, CLOSE_CROWD, answered, i["http_deferred_closes"],
                     st.get("loop_max_turn_us", -1), st.get("loop_max_turn_cpu_us", -1)))


class CloseBudgetTest(unittest.TestCase):
    def setUp(self):
        raise_nofile(self, CLOSE_CROWD + 200)

    def test_real_client_answered_while_crowds_hang_up(self):
        hport = free_tcp_port()
        with Daemon("--http", "127.0.0.1:%d" % hport) as d:
            good = d.connect(timeout=CALL_TIMEOUT)
            cmd = resp_command("CL.THROTTLE", "good", "1000000", "1000000", "1", "1")

            def ask():
                good.sendall(cmd)
                reply = recv_until(good, b"\r\n" * 1, limit=256)
                while reply.count(b"\r\n") < 6:  # an array of five integers
                    chunk = good.recv(256)
                    if not chunk:
                        break
                    reply += chunk
                self.assertTrue(reply.startswith(b"*5\r\n:0\r\n"), reply)

            ask()
            base = info_ints(d, "clients")["connected_clients"]
            answered = 0
            deadline = time.time() + 120
            for rnd in range(CLOSE_ROUNDS):
                self.assertLess(time.time(), deadline)
                crowd = [d.connect(timeout=5) for _ in range(CLOSE_CROWD)]
                wait = time.time() + 20
                while (info_ints(d, "clients")["connected_clients"] < base + CLOSE_CROWD
                       and time.time() < wait):
                    time.sleep(0.05)
                # Paused while they all hang up: one turn sees every hang-up.
                os.kill(d.proc.pid, signal.SIGSTOP)
                try:
                    for s in crowd:
                        s.close()
                finally:
                    os.kill(d.proc.pid, signal.SIGCONT)
                # The real client right after, while the crowd is closed.
                for _ in range(50):
                    ask()
                    answered += 1
                wait = time.time() + 20
                while (info_ints(d, "clients")["connected_clients"] > base
                       and time.time() < wait):
                    ask()
                    answered += 1
                    time.sleep(0.01)
                self.assertEqual(info_ints(d, "clients")["connected_clients"], base,
                                 "round %d: hung-up clients left open" % rnd)
            st = info_ints(d, "stats")
            # Past 64 a turn, the hang-ups were closed at the next turns.
            self.assertGreater(st["deferred_closes"], 0, st)
            self.assertEqual(metric(hport, "deferred_closes_total"),
                             info_ints(d, "stats")["deferred_closes"])
            good.close()
            print("ok: %d rounds of %d Unix socket clients hanging up at once: a real client's "
                  "%d calls answered, every hung-up client closed, %d closed at a later turn "
                  "(longest turn %d us)"
                  % (CLOSE_ROUNDS, CLOSE_CROWD, answered, st["deferred_closes"],
                     st.get("loop_max_turn_us", -1)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
