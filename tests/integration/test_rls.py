"""Envoy's rate limit service on a real sluiced: a gRPC client generated at
test time from the same .proto files the daemon is built from (Debian's
python3-grpcio and python3-grpc-tools) calls ShouldRateLimit against an
envoyproxy/ratelimit YAML directory; bad calls get their gRPC status and
cost nothing else; SIGHUP reloads the directory, keeping the running config
when the new one is bad.

The limits use hour and day windows so that no window boundary falls inside
a test (each test first waits out the last seconds of an hour, bounded)."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import SLUICED, Daemon, free_tcp_port  # noqa: E402

import rlsclient  # noqa: E402  (the generated gRPC client)
from rlsclient import HAVE_GRPC, METHOD  # noqa: E402

if HAVE_GRPC:
    import grpc  # noqa: E402

rls_pb2 = None


def setUpModule():
    global rls_pb2
    if rlsclient.setup():
        rls_pb2 = rlsclient.pb()


def tearDownModule():
    rlsclient.teardown()


CONFIG = """\
# envoyproxy/ratelimit's format, as its README documents it
domain: app
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: path
    value: /login
    rate_limit:
      unit: hour
      requests_per_unit: 2
    descriptors:
      - key: user
        rate_limit:
          unit: day
          requests_per_unit: 1
  - key: shadow
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: free
    rate_limit:
      unlimited: true
  - key: bulk
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: plan
    value: basic
    rate_limit:
      name: basic
      unit: hour
      requests_per_unit: 1
  - key: plan
    value: gold
    rate_limit:
      unit: hour
      requests_per_unit: 5
      replaces:
        - name: basic
"""

OTHER = """\
domain: other
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: 1}
"""


def wait_past_hour_boundary():
    """Waits (at most 4 s) if the wall clock is in an hour's last 3 seconds."""
    left = 3600 - time.time() % 3600
    if left < 3:
        time.sleep(left + 0.2)


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class RlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-rls-")
        cls.cfgdir = os.path.join(cls.tmp, "ratelimit")
        os.mkdir(cls.cfgdir)
        with open(os.path.join(cls.cfgdir, "app.yaml"), "w") as f:
            f.write(CONFIG)
        with open(os.path.join(cls.cfgdir, "other.yml"), "w") as f:
            f.write(OTHER)
        with open(os.path.join(cls.cfgdir, "README.txt"), "w") as f:
            f.write("not YAML: ignored\n")
        cls.port = free_tcp_port()
        cls.metrics_port = free_tcp_port()
        cls.d = Daemon("--grpc", "127.0.0.1:%d" % cls.port, "--ratelimit-config", cls.cfgdir,
                       "--ratelimit-headers", "--metrics", "127.0.0.1:%d" % cls.metrics_port,
                       tmpdir=cls.tmp)
        cls.d.start()
        cls.chan, cls.call = rlsclient.connect(cls.port)
        cls.raw = cls.chan.unary_unary(METHOD)  # bytes in, bytes out

    @classmethod
    def tearDownClass(cls):
        cls.chan.close()
        status = cls.d.stop()
        log = cls.d.logtext()
        cls.d.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert status == 0, "sluiced exited with %d:\n%s" % (status, log)

    def setUp(self):
        wait_past_hour_boundary()

    def req(self, *descs, domain="app", hits=0):
        return self.call(rlsclient.request(domain, *descs, hits=hits), timeout=5)

    def test_single_descriptor_until_over_limit(self):
        R = rls_pb2.RateLimitResponse
        seen = []
        for _ in range(4):
            resp = self.req([("user", "alice")])
            st = resp.statuses[0]
            seen.append((resp.overall_code, st.code, st.limit_remaining))
        self.assertEqual(seen, [(R.OK, R.OK, 2), (R.OK, R.OK, 1), (R.OK, R.OK, 0),
                                (R.OVER_LIMIT, R.OVER_LIMIT, 0)])
        st = resp.statuses[0]
        self.assertEqual(st.current_limit.requests_per_unit, 3)
        self.assertEqual(st.current_limit.unit, R.RateLimit.HOUR)
        # calendar window: resets at the next full hour of the wall clock
        want = 3600 - time.time() % 3600
        got = st.duration_until_reset.seconds + st.duration_until_reset.nanos / 1e9
        self.assertLess(abs(got - want), 2.0, (got, want))
        # each value under a key-only rule has its own counter
        self.assertEqual(self.req([("user", "bob")]).overall_code, R.OK)

    def test_nested_descriptors(self):
        R = rls_pb2.RateLimitResponse
        nested = [("path", "/login"), ("user", "carol")]
        first = self.req(nested)
        self.assertEqual(first.overall_code, R.OK)
        self.assertEqual(first.statuses[0].current_limit.unit, R.RateLimit.DAY)
        self.assertEqual(first.statuses[0].current_limit.requests_per_unit, 1)
        self.assertEqual(self.req(nested).overall_code, R.OVER_LIMIT)
        # the parent entry alone has its own limit (2 per hour)
        codes = [self.req([("path", "/login")]).overall_code for _ in range(3)]
        self.assertEqual(codes, [R.OK, R.OK, R.OVER_LIMIT])
        # a value with no rule and no default: no limit applies
        resp = self.req([("path", "/other")])
        self.assertEqual(resp.overall_code, R.OK)
        self.assertFalse(resp.statuses[0].HasField("current_limit"))

    def test_hits_addend(self):
        R = rls_pb2.RateLimitResponse
        resp = self.req([("bulk", "b1")], hits=4)
        self.assertEqual(resp.statuses[0].limit_remaining, 6)
        # a descriptor's own hits_addend overrides; 0 only looks
        resp = self.req({"entries": [("bulk", "b1")], "hits": 0}, hits=9)
        self.assertEqual((resp.overall_code, resp.statuses[0].limit_remaining), (R.OK, 6))
        resp = self.req({"entries": [("bulk", "b1")], "hits": 6})
        self.assertEqual((resp.overall_code, resp.statuses[0].limit_remaining), (R.OK, 0))
        # exactly at the limit a look is still OK; one more hit is over
        look = self.req({"entries": [("bulk", "b1")], "hits": 0})
        self.assertEqual((look.overall_code, look.statuses[0].limit_remaining), (R.OK, 0))
        self.assertEqual(self.req([("bulk", "b1")]).overall_code, R.OVER_LIMIT)

    def test_every_hit_counts_as_envoyproxy(self):
        """envoyproxy/ratelimit counts refused hits too: a counter past its
        limit makes a later look with hits_addend 0 OVER_LIMIT."""
        R = rls_pb2.RateLimitResponse
        resp = self.req({"entries": [("bulk", "b9")], "hits": 7})
        self.assertEqual(resp.overall_code, R.OK)
        resp = self.req({"entries": [("bulk", "b9")], "hits": 7})  # 14 of 10
        self.assertEqual(resp.overall_code, R.OVER_LIMIT)
        look = self.req({"entries": [("bulk", "b9")], "hits": 0})
        self.assertEqual((look.overall_code, look.statuses[0].limit_remaining),
                         (R.OVER_LIMIT, 0))

    def token_quota(self, value, limit, cost, n):
        """Envoy's token-quota pattern: look with 0 hits before the request,
        charge the real cost after the response; how many requests pass."""
        R = rls_pb2.RateLimitResponse
        passed = 0
        for _ in range(n):
            d = {"entries": [("tenant", value)], "limit": limit}
            if self.req(dict(d, hits=0)).overall_code != R.OK:
                continue
            passed += 1
            self.req(dict(d, hits=cost))
        return passed

    def test_token_quota_pattern_charges_after_the_response(self):
        # 2 per MINUTE (unit 2), cost 1: looks pass at counts 0, 1, 2
        self.assertEqual(self.token_quota("tq1", (2, 2), 1, 10), 3)
        # 1000 per MINUTE, 300-unit charges: looks pass at 0, 300, 600, 900
        self.assertEqual(self.token_quota("tq2", (1000, 2), 300, 8), 4)

    def test_overrides_of_different_units_keep_their_own_counters(self):
        R = rls_pb2.RateLimitResponse
        day = {"entries": [("tenant", "u1")], "limit": (2, 4)}     # 2 per DAY
        sec = {"entries": [("tenant", "u1")], "limit": (5, 1)}     # 5 per SECOND
        self.assertEqual([self.req(day).overall_code for _ in range(3)],
                         [R.OK, R.OK, R.OVER_LIMIT])
        self.assertEqual(self.req(sec).overall_code, R.OK)
        # the per-second hit did not touch the exhausted day budget
        self.assertEqual(self.req(day).overall_code, R.OVER_LIMIT)

    def test_duration_until_reset_in_whole_seconds_as_envoyproxy(self):
        sec = {"entries": [("tenant", "r1")], "limit": (5, 1)}     # per SECOND
        minute = {"entries": [("tenant", "r1")], "limit": (5, 2)}  # per MINUTE
        d = self.req(sec).statuses[0].duration_until_reset
        self.assertEqual((d.seconds, d.nanos), (1, 0))
        want = 60 - int(time.time()) % 60
        d = self.req(minute).statuses[0].duration_until_reset
        self.assertEqual(d.nanos, 0)
        self.assertIn(d.seconds, (want, want - 1 if want > 1 else 60))

    def test_limit_override(self):
        R = rls_pb2.RateLimitResponse
        d = {"entries": [("tenant", "t1")], "limit": (2, 3)}  # 2 per HOUR (type.v3 unit 3)
        resp = [self.req(d) for _ in range(3)]
        self.assertEqual([r.overall_code for r in resp], [R.OK, R.OK, R.OVER_LIMIT])
        self.assertEqual(resp[0].statuses[0].current_limit.requests_per_unit, 2)
        self.assertEqual(resp[0].statuses[0].current_limit.unit, R.RateLimit.HOUR)

    def test_shadow_mode_is_always_ok(self):
        R = rls_pb2.RateLimitResponse
        resp = [self.req([("shadow", "s1")]) for _ in range(3)]
        self.assertEqual([r.overall_code for r in resp], [R.OK] * 3)
        self.assertEqual([r.statuses[0].code for r in resp], [R.OK] * 3)
        # counted all the same: nothing remains
        self.assertEqual(resp[2].statuses[0].limit_remaining, 0)

    def test_unlimited(self):
        R = rls_pb2.RateLimitResponse
        for _ in range(20):
            resp = self.req([("free", "x")])
            self.assertEqual(resp.overall_code, R.OK)
        self.assertEqual(resp.statuses[0].limit_remaining, 4294967295)
        self.assertFalse(resp.statuses[0].HasField("current_limit"))

    def test_several_descriptors_and_replaces(self):
        R = rls_pb2.RateLimitResponse
        # gold replaces the limit named basic: basic (1/h) does not apply
        codes = [self.req([("plan", "basic")], [("plan", "gold")]).overall_code
                 for _ in range(3)]
        self.assertEqual(codes, [R.OK] * 3)
        resp = self.req([("plan", "basic")], [("plan", "gold")])
        self.assertFalse(resp.statuses[0].HasField("current_limit"))
        self.assertEqual(resp.statuses[1].limit_remaining, 1)
        # alone, basic applies; any descriptor over its limit makes the whole OVER_LIMIT
        self.assertEqual(self.req([("plan", "basic")]).overall_code, R.OK)
        resp = self.req([("user", "dave")], [("plan", "basic")])
        self.assertEqual(resp.overall_code, R.OVER_LIMIT)
        self.assertEqual([s.code for s in resp.statuses], [R.OK, R.OVER_LIMIT])

    def test_response_headers(self):
        resp = self.req([("user", "erin")], [("bulk", "b2")])
        h = {x.key: x.value for x in resp.response_headers_to_add}
        self.assertEqual(h["RateLimit-Limit"], "3")      # the descriptor closest to its limit
        self.assertEqual(h["RateLimit-Remaining"], "2")
        self.assertLessEqual(abs(int(h["RateLimit-Reset"]) - (3600 - time.time() % 3600)), 2)

    def test_second_file_and_unknown_domain(self):
        R = rls_pb2.RateLimitResponse
        codes = [self.req([("k", "v")], domain="other").overall_code for _ in range(2)]
        self.assertEqual(codes, [R.OK, R.OVER_LIMIT])
        resp = self.req([("k", "v")], domain="nosuch")
        self.assertEqual(resp.overall_code, R.OK)

    def test_bad_calls_get_their_status(self):
        bad = self.chan.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/Nope")
        with self.assertRaises(grpc.RpcError) as e:
            bad(b"", timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        with self.assertRaises(grpc.RpcError) as e:
            self.raw(b"\x0a\xff\xff\xff\xff\x0f", timeout=5)  # a length past the end
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as e:
            self.raw(b"\x0a\x80" + b"\x80\x08" + b"d" * 131072, timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        with self.assertRaises(grpc.RpcError) as e:
            self.call(rls_pb2.RateLimitRequest(domain=""), timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(grpc.RpcError) as e:
            self.call(rls_pb2.RateLimitRequest(domain="app"), timeout=5,
                      compression=grpc.Compression.Gzip)
        self.assertIn(e.exception.code(), (grpc.StatusCode.INTERNAL,
                                           grpc.StatusCode.INVALID_ARGUMENT))
        # none of it affected the service
        self.assertEqual(self.req([("user", "frank")]).overall_code,
                         rls_pb2.RateLimitResponse.OK)

    def metric(self, name):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=5) as f:
            for line in f.read().decode().splitlines():
                if line.startswith(name + " "):
                    return int(float(line.split()[1]))
        raise AssertionError("no metric " + name)

    def test_metrics_count_calls_and_errors(self):
        calls, over = self.metric("sluice_rls_calls_total"), self.metric("sluice_rls_over_limit_total")
        errors = self.metric("sluice_rls_errors_total")
        for _ in range(3):
            self.req([("user", "hank")])
        self.req([("user", "hank")])
        bad = self.chan.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/Nope")
        with self.assertRaises(grpc.RpcError):
            bad(b"", timeout=5)
        self.assertEqual(self.metric("sluice_rls_calls_total"), calls + 4)
        self.assertEqual(self.metric("sluice_rls_over_limit_total"), over + 1)
        self.assertEqual(self.metric("sluice_rls_errors_total"), errors + 1)
        self.assertGreaterEqual(self.metric("sluice_rls_connections"), 1)

    def test_malformed_http2_gets_goaway_and_costs_nothing_else(self):
        frames = []
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        try:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"           # the preface, then
                      b"\x00\x00\x03\x04\x00\x00\x00\x00\x00abc")  # a 3-byte SETTINGS
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        while len(data) >= 9:
            n = int.from_bytes(data[0:3], "big")
            frames.append(data[3])
            data = data[9 + n:]
        self.assertIn(7, frames, "expected a GOAWAY frame")  # type 7, then the close
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        try:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not HTTP/2 at all
            s.settimeout(5)
            while s.recv(65536):
                pass
        finally:
            s.close()
        self.assertEqual(self.req([("user", "gina")]).overall_code,
                         rls_pb2.RateLimitResponse.OK)


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class RlsReloadTest(unittest.TestCase):
    def test_sighup_reload_good_and_bad(self):
        tmp = tempfile.mkdtemp(prefix="sluice-rls-")
        cfgdir = os.path.join(tmp, "rl")
        os.mkdir(cfgdir)
        path = os.path.join(cfgdir, "a.yaml")
        with open(path, "w") as f:
            f.write("domain: d\ndescriptors:\n  - key: k\n"
                    "    rate_limit: {unit: day, requests_per_unit: 1}\n")
        port = free_tcp_port()
        with Daemon("--grpc", "127.0.0.1:%d" % port, "--ratelimit-config", cfgdir,
                    tmpdir=tmp) as d:
            chan, call = rlsclient.connect(port)

            def limit_of(value):
                r = rls_pb2.RateLimitRequest(domain="d")
                e = r.descriptors.add().entries.add()
                e.key, e.value = "k", value
                return call(r, timeout=5).statuses[0].current_limit.requests_per_unit

            self.assertEqual(limit_of("a"), 1)
            with open(path, "w") as f:
                f.write("domain: d\ndescriptors:\n  - key: k\n"
                        "    rate_limit: {unit: day, requests_per_unit: 7}\n")
            d.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while limit_of("b") != 7 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(limit_of("c"), 7)
            # a bad file: the running config stays, the log names file and line
            with open(os.path.join(cfgdir, "b.yaml"), "w") as f:
                f.write("domain: e\ndescriptors:\n  - key: k\n"
                        "    rate_limit: {unit: fortnight, requests_per_unit: 7}\n")
            d.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "b.yaml:4" not in d.logtext() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn("b.yaml:4: invalid rate limit unit 'fortnight'", d.logtext())
            self.assertEqual(limit_of("d"), 7)
            chan.close()
        shutil.rmtree(tmp, ignore_errors=True)

    def test_config_file_keys(self):
        tmp = tempfile.mkdtemp(prefix="sluice-rls-")
        try:
            os.mkdir(os.path.join(tmp, "rl"))
            with open(os.path.join(tmp, "rl", "a.yaml"), "w") as f:
                f.write("domain: d\ndescriptors:\n  - key: k\n"
                        "    rate_limit: {unit: day, requests_per_unit: 2}\n")
            port = free_tcp_port()
            conf = os.path.join(tmp, "sluice.conf")
            with open(conf, "w") as f:
                f.write("[sluiced]\ngrpc = 127.0.0.1:%d\nratelimit_config = %s\n"
                        "ratelimit_algorithm = gcra\nratelimit_headers = on\n"
                        % (port, os.path.join(tmp, "rl")))
            with Daemon("--config", conf, tmpdir=tmp):
                chan, call = rlsclient.connect(port)
                r = rls_pb2.RateLimitRequest(domain="d")
                e = r.descriptors.add().entries.add()
                e.key, e.value = "k", "v"
                got = [call(r, timeout=5) for _ in range(3)]
                R = rls_pb2.RateLimitResponse
                self.assertEqual([x.overall_code for x in got], [R.OK, R.OK, R.OVER_LIMIT])
                # gcra: the limit refills continuously, a day for the whole of it
                reset = got[1].statuses[0].duration_until_reset.seconds
                self.assertGreater(reset, 86400 - 60)
                self.assertTrue(got[0].response_headers_to_add)
                chan.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_bad_config_at_start_names_the_line(self):
        tmp = tempfile.mkdtemp(prefix="sluice-rls-")
        try:
            with open(os.path.join(tmp, "x.yaml"), "w") as f:
                f.write("domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n")
            p = subprocess.run([SLUICED, "--socket", os.path.join(tmp, "s.sock"),
                                "--ratelimit-config", tmp], capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(b"x.yaml:4: config error, unknown key 'rate_limt'", p.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class RlsClusterTest(unittest.TestCase):
    """One descriptor limit shared by 3 clustered nodes: the cluster admits
    about the limit in all, not the limit on each node."""

    LIMIT = 30

    def test_global_descriptor_shared_by_three_nodes(self):
        from test_cluster import Cluster  # noqa: E402  (the cluster tests' helper)
        tmp = tempfile.mkdtemp(prefix="sluice-rls-")
        cfgdir = os.path.join(tmp, "rl")
        os.mkdir(cfgdir)
        with open(os.path.join(cfgdir, "g.yaml"), "w") as f:
            f.write("domain: g\ndescriptors:\n  - key: tenant\n"
                    "    rate_limit: {unit: day, requests_per_unit: %d}\n" % self.LIMIT)
        ports = [free_tcp_port() for _ in range(3)]

        class RlsCluster(Cluster):
            def args(self, i, **kw):
                return super().args(i, **kw) + ["--grpc", "127.0.0.1:%d" % ports[i],
                                                "--ratelimit-config", cfgdir]

        c = RlsCluster(3, tmp)
        chans = []
        try:
            c.start_all()
            c.wait_members(["node1", "node2", "node3"])
            calls = []
            for p in ports:
                ch, call = rlsclient.connect(p)
                chans.append(ch)
                calls.append(call)
            req = rls_pb2.RateLimitRequest(domain="g")
            e = req.descriptors.add().entries.add()
            e.key, e.value = "tenant", "acme"
            admitted = [0, 0, 0]
            deadline = time.monotonic() + 20
            sent = 0
            # 3x the limit in all, round robin over the nodes, over about 6 s
            while sent < 3 * 3 * self.LIMIT and time.monotonic() < deadline:
                i = sent % 3
                if calls[i](req, timeout=5).overall_code == rls_pb2.RateLimitResponse.OK:
                    admitted[i] += 1
                sent += 1
                time.sleep(0.02)
            total = sum(admitted)
            print("global descriptor: %d sent, admitted %s = %d (limit %d)"
                  % (sent, admitted, total, self.LIMIT))
            self.assertEqual(sent, 9 * self.LIMIT)
            # local limits would admit 3 x 30 = 90; the cluster admits the
            # limit plus what its nodes admit on credit while the owner's
            # word is a lease old (at most about a unit per node per lease
            # round near the end; README "The bound")
            self.assertLessEqual(total, self.LIMIT + 4 * 3)
            self.assertGreaterEqual(total, 0.75 * self.LIMIT)
            self.assertTrue(all(a > 0 for a in admitted), admitted)
        finally:
            for ch in chans:
                ch.close()
            bad = c.stop_all()
            shutil.rmtree(tmp, ignore_errors=True)
        self.assertEqual(bad, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
