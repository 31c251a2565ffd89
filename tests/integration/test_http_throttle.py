"""The HTTP decision endpoint of a real sluiced (/v1/throttle): the policy
form, the CL.THROTTLE form, the header form, cost, the refusal status and
its headers, errors, and that the endpoint and RESP clients share one
state (the same key drawn from both sides)."""
import os
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402
from sluicetest import Daemon, free_tcp_port  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)

CONF = """[policy api]
algorithm = gcra
burst = 2
rate = 1 per 1h
"""


def get(port, path, headers=None):
    """(status, headers dict with lower-case names, body) of one GET."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


class HttpThrottle(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-http-")
        self.conf = os.path.join(self.dir.name, "sluice.conf")
        with open(self.conf, "w") as f:
            f.write(CONF)
        self.port = free_tcp_port()

    def tearDown(self):
        self.dir.cleanup()

    def daemon(self, *extra):
        return Daemon("--config", self.conf, "--http", "127.0.0.1:%d" % self.port, *extra)

    def test_policy_form_until_refused(self):
        with self.daemon():
            # burst 2: three at once, then refused for about an hour.
            for i in range(3):
                st, h, body = get(self.port, "/v1/throttle?key=u1&policy=api")
                self.assertEqual((st, body), (200, "allowed\n"), h)
                self.assertEqual(h["ratelimit-policy"], '"api";q=3;w=3600')
                self.assertEqual(h["ratelimit"].split(";")[1], "r=%d" % (2 - i))
            st, h, body = get(self.port, "/v1/throttle?key=u1&policy=api")
            self.assertEqual((st, body), (429, "limited\n"))
            self.assertEqual(h["ratelimit"].split(";")[1], "r=0")
            retry = int(h["retry-after"])
            self.assertTrue(3590 <= retry <= 3600, retry)  # one emission interval: 1h
            # Another key is untouched.
            self.assertEqual(get(self.port, "/v1/throttle?key=u2&policy=api")[0], 200)

    def test_inline_form_is_cl_throttle(self):
        with self.daemon() as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            # The endpoint and a RESP client draw on the same key.
            self.assertEqual(r.execute_command("CL.THROTTLE", "k", 1, 1, 60)[0], 0)
            st, h, _ = get(self.port, "/v1/throttle?key=k&burst=1&count=1&period=60")
            self.assertEqual(st, 200)
            self.assertEqual(h["ratelimit-policy"], '"default";q=2;w=60')
            st, h, _ = get(self.port, "/v1/throttle?key=k&burst=1&count=1&period=60")
            self.assertEqual(st, 429)
            self.assertEqual(h["retry-after"], str(r.execute_command(
                "CL.THROTTLE", "k", 1, 1, 60)[3]))
            r.close()

    def test_charge_after_the_response_drives_the_key_into_debt(self):
        with self.daemon() as d:
            # charge the real cost after the response: 5 on a bucket of 3
            # (cost=0 is refused over HTTP: a look would be a way around)
            st, h, body = get(self.port, "/v1/throttle?key=c1&policy=api&charge=5")
            self.assertEqual((st, body), (200, "charged, over the limit\n"))
            self.assertEqual(h["ratelimit"].split(";")[1], "r=0")
            # 5 units at 1 per hour: one fits again after 3 hours
            self.assertTrue(3 * 3600 - 10 <= int(h["retry-after"]) <= 3 * 3600, h)
            st, _, _ = get(self.port, "/v1/throttle?key=c1&policy=api")
            self.assertEqual(st, 429)
            # the inline form charges the key CL.THROTTLE decides
            st, _, body = get(self.port, "/v1/throttle?key=c2&burst=1&count=1&period=60&charge=1")
            self.assertEqual((st, body), (200, "charged\n"))
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            self.assertEqual(r.execute_command("CL.THROTTLE", "c2", 1, 1, 60)[:3], [0, 2, 0])
            r.close()
            st, _, _ = get(self.port, "/v1/throttle?key=c1&policy=api&charge=x")
            self.assertEqual(st, 400)

    def test_header_form_cost_and_deny_status(self):
        with self.daemon("--http-deny-status", "403", "--http-trust-headers", "on"):
            hdr = {"X-Sluice-Key": "proxy:1", "X-Sluice-Policy": "api", "X-Sluice-Cost": "2"}
            st, h, _ = get(self.port, "/v1/throttle", hdr)
            self.assertEqual(st, 200)
            self.assertEqual(h["ratelimit"].split(";")[1], "r=1")
            st, h, _ = get(self.port, "/v1/throttle", hdr)
            self.assertEqual(st, 403)  # cost 2 > 1 left
            self.assertIn("retry-after", h)
            # The query wins over headers.
            st, _, _ = get(self.port, "/v1/throttle?key=other&policy=api", hdr)
            self.assertEqual(st, 200)
            # A percent-encoded key is decoded: the same key as the header's.
            hdr1 = dict(hdr, **{"X-Sluice-Cost": "1"})
            st, _, _ = get(self.port, "/v1/throttle?key=proxy%3A1&policy=api&cost=1", hdr1)
            self.assertEqual(st, 200)
            st, _, _ = get(self.port, "/v1/throttle?key=proxy%3A1&policy=api&cost=1")
            self.assertEqual(st, 403)

    def test_client_headers_are_not_trusted_by_default(self):
        """A proxy forwards its end user's headers: by default none of the
        X-Sluice-* headers is read, so a client can neither spend nothing
        (X-Sluice-Cost: 0) nor choose the key (X-Sluice-Key: victim)."""
        with self.daemon():
            q = "/v1/throttle?key=me&policy=api"
            codes = [get(self.port, q)[0] for _ in range(3)]
            self.assertEqual(codes, [200, 200, 200])
            hostile = {"X-Sluice-Cost": "0", "X-Sluice-Policy": "nope",
                       "X-Sluice-Burst": "1000", "X-Sluice-Count": "1000",
                       "X-Sluice-Period": "1"}
            codes = [get(self.port, q, hostile)[0] for _ in range(20)]
            self.assertEqual(codes, [429] * 20)
            # the key is the query's, not the header's: the victim is untouched
            for _ in range(5):
                get(self.port, q, {"X-Sluice-Key": "victim"})
            self.assertEqual(get(self.port, "/v1/throttle?key=victim&policy=api")[0], 200)
            # with no key in the query, the header does not supply one
            st, _, body = get(self.port, "/v1/throttle?policy=api", {"X-Sluice-Key": "victim"})
            self.assertEqual(st, 400, body)
            self.assertIn("http_trust_headers", body)

    def test_key_from_a_named_header(self):
        """Traefik's form: the key is X-Forwarded-For's first address."""
        with self.daemon():
            q = "/v1/throttle?policy=api&key_header=X-Forwarded-For"
            codes = [get(self.port, q, {"X-Forwarded-For": "10.0.0.7, 10.0.0.1"})[0]
                     for _ in range(4)]
            self.assertEqual(codes, [200, 200, 200, 429])
            # Another client address is another key.
            self.assertEqual(get(self.port, q, {"X-Forwarded-For": "10.0.0.8"})[0], 200)
            # The same key by name: 10.0.0.7 is spent.
            self.assertEqual(get(self.port, "/v1/throttle?policy=api&key=10.0.0.7")[0], 429)
            # Without the named header there is no key.
            self.assertEqual(get(self.port, q)[0], 400)

    def test_errors(self):
        with self.daemon():
            cases = [
                ("/v1/throttle", "key is required"),
                ("/v1/throttle?key=a", "expected policy=NAME"),
                ("/v1/throttle?key=a&policy=nope", "unknown policy 'nope'"),
                ("/v1/throttle?key=a&burst=1&count=x&period=60", "Couldn't parse"),
                ("/v1/throttle?key=a&burst=1&count=0&period=60", "Zero rates"),
                ("/v1/throttle?key=a&policy=api&burst=1", "exclusive"),
                ("/v1/throttle?key=a&policy=api&cost=-1", "cost:"),
                ("/v1/throttle?key=a&policy=api&cost=0", "cost:"),
                ("/v1/throttle?key=a&policy=api&cost=00", "cost:"),
                ("/v1/throttle?key=%zz&policy=api", "key:"),
            ]
            for path, want in cases:
                st, _, body = get(self.port, path)
                self.assertEqual(st, 400, (path, body))
                self.assertIn(want, body, path)
            # The listener's other routes are still there.
            self.assertEqual(get(self.port, "/health")[2], "ok\n")
            self.assertEqual(get(self.port, "/metrics")[0], 200)

    def test_metrics_flag_is_an_alias(self):
        with Daemon("--config", self.conf, "--metrics", "127.0.0.1:%d" % self.port):
            self.assertEqual(get(self.port, "/v1/throttle?key=m&policy=api")[0], 200)

    def test_decisions_apart_from_the_metrics(self):
        """--http-decisions HOST:PORT serves /v1/throttle there and not on
        the --http listener, which keeps /metrics and /health; off serves it
        nowhere (a pod that may scrape the metrics cannot spend keys)."""
        dport = free_tcp_port()
        with self.daemon("--http-decisions", "127.0.0.1:%d" % dport):
            self.assertEqual(get(self.port, "/v1/throttle?key=d&policy=api")[0], 404)
            self.assertEqual(get(self.port, "/health")[:3:2], (200, "ok\n"))
            self.assertEqual(get(self.port, "/metrics")[0], 200)
            self.assertEqual(get(dport, "/v1/throttle?key=d&policy=api")[:3:2],
                             (200, "allowed\n"))
            self.assertEqual(get(dport, "/metrics")[0], 404)
        with self.daemon("--http-decisions", "off"):
            self.assertEqual(get(self.port, "/v1/throttle?key=d&policy=api")[0], 404)
            self.assertEqual(get(self.port, "/metrics")[0], 200)
        with open(self.conf, "a") as f:
            f.write("[sluiced]\nhttp_decisions = 127.0.0.1:%d\n" % dport)
        with self.daemon():
            self.assertEqual(get(self.port, "/v1/throttle?key=e&policy=api")[0], 404)
            self.assertEqual(get(dport, "/v1/throttle?key=e&policy=api")[0], 200)

    def test_config_file_keys(self):
        with open(self.conf, "a") as f:
            f.write("[sluiced]\nhttp = 127.0.0.1:%d\nhttp_deny_status = 403\n" % self.port)
        with Daemon("--config", self.conf):
            codes = [get(self.port, "/v1/throttle?key=c&policy=api")[0] for _ in range(4)]
            self.assertEqual(codes, [200, 200, 200, 403])


class HttpCluster(unittest.TestCase):
    """One global policy decided through /v1/throttle on 3 clustered nodes:
    the cluster admits about the limit in all, not the limit on each node
    (the endpoint runs the same command as RESP, so the replica decides)."""

    LIMIT = 30

    def test_global_policy_through_http_on_three_nodes(self):
        import shutil
        import time
        from test_cluster import Cluster  # noqa: E402  (the cluster tests' helper)
        tmp = tempfile.mkdtemp(prefix="sluice-httpc-")
        conf = os.path.join(tmp, "sluice.conf")
        with open(conf, "w") as f:
            f.write("[policy g]\nalgorithm = gcra\nburst = %d\nrate = 1 per 1h\n"
                    "scope = global\n" % (self.LIMIT - 1))
        ports = [free_tcp_port() for _ in range(3)]

        class HttpClusterNodes(Cluster):
            def args(self, i, **kw):
                return super().args(i, **kw) + ["--http", "127.0.0.1:%d" % ports[i],
                                                "--config", conf]

        c = HttpClusterNodes(3, tmp)
        try:
            c.start_all()
            c.wait_members(["node1", "node2", "node3"])

            def synced():
                for i in range(3):
                    with c.client(i) as r:
                        if r.info("cluster").get("synced") != "yes":
                            return False
                return True

            # As the cluster tests do: decisions once every node has synced
            # the cluster's state for global keys.
            sluicetest.wait_until(synced, 20, "every node to be synced", interval=0.1)
            admitted, sent = [0, 0, 0], 0
            deadline = time.monotonic() + 20
            # 3x the limit in all, round robin over the nodes
            while sent < 9 * self.LIMIT and time.monotonic() < deadline:
                i = sent % 3
                if get(ports[i], "/v1/throttle?key=acme&policy=g")[0] == 200:
                    admitted[i] += 1
                sent += 1
                time.sleep(0.02)
            total = sum(admitted)
            print("global policy over HTTP: %d sent, admitted %s = %d (limit %d)"
                  % (sent, admitted, total, self.LIMIT))
            self.assertEqual(sent, 9 * self.LIMIT)
            # Local limits would admit 3 x 30 = 90: the cluster decides.
            self.assertLessEqual(total, 1.25 * self.LIMIT)
            # A burst-only key (1 per hour) spread round robin: the owner
            # grants what the shares leave, so about the whole burst.
            self.assertGreaterEqual(total, 0.8 * self.LIMIT)
            self.assertTrue(all(a > 0 for a in admitted), admitted)
        finally:
            c.stop_all()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
