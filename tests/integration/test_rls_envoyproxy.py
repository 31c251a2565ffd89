"""envoyproxy/ratelimit's own test cases, replayed against a real sluiced's
rate limit service (gRPC, python3-grpcio), with that project's own fixtures
(tests/anchors/envoyproxy/, copied with their licence, Apache-2.0):

  config/*.yaml        test/config/config_test.go: every bad file is refused
                       with upstream's message; GetLimit cases are asked as
                       ShouldRateLimit calls (the limit a status reports).
  runtime/             test/integration/integration_test.go:
                       testBasicBaseConfig, testConfigReload,
                       testShareThreshold.
  examples/, scripts/  integration-test/scripts/*.sh: Envoy's routes in
                       examples/envoy/proxy.yaml turned into the descriptors
                       Envoy would send (ROUTES below); replaces.sh is read
                       and replayed line by line.
  config/merge_*      TestDomainMerge, TestDuplicateKeyDomainMerge, with
                       MERGE_DOMAIN_CONFIG=true in sluiced's environment as
                       upstream reads it (the same file twice is two names
                       in one directory here).

Not applicable here, and why (the rest of upstream's cases):
  - Backends and transports: the Redis, Redis Cluster, Sentinel, TLS, auth,
    memcache, per-second-Redis and local-cache variants of TestBasicConfig
    (sluice keeps its counters itself; each variant replays the same
    testBasicBaseConfig, run here once), mtls_test.go, TestReloadGRPCServerCerts,
    the xDS config provider tests, and fixed_cache_impl_test.go (memcache's
    client calls and its near-limit statistics).
  - Per-descriptor statistics beyond their keys (near_limit, local cache
    hit counters, the TestValueToMetric_* and TestWildcardStatsBehavior
    keys, and the stats lines of value-included-in-stats-key-when-
    unspecified.sh): sluice's series are hits, over, within and shadow per
    key; TestDetailedMetric's keys are replayed (DetailedMetricTest).
  quota_mode           test/service/ratelimit_test.go's quota cases
                       (TestServicePerDescriptorQuotaMode, ...Mixed...,
                       ...QuotaModeOnlyAll/SomeOverTheLimit,
                       TestServiceGlobalQuotaMode, ...WithShadowMode) on a
                       config of the same limits (upstream mocks the
                       counters: here they are driven to the same state),
                       and quota.sh, token-quota.sh up to their one-minute
                       sleep (the window's end is another case's).
  dynamic_metadata     TestMetadata (config_test.go, metadata.yaml) and
                       ratelimit_test.go's TestMetadataReturnedForPassed-
                       Descriptors, ...ForAllPassedDescriptors,
                       TestOverlappingMetadataReturnsTheFirstValue, with
                       RESPONSE_DYNAMIC_METADATA=true (DynamicMetadataTest);
                       multiservice-tokenquota.sh up to its one-minute
                       sleep, the service chosen from the answer's metadata
                       as Envoy's route does (ScriptsTest).
testConfigReload runs as upstream's (the directory is watched) and once
more with a SIGHUP after each change.

Minute and hour windows are calendar windows: a case that needs one window
first waits out the last seconds of the current one (bounded)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlsclient  # noqa: E402  (the generated gRPC client)
from rlsclient import HAVE_GRPC, pb  # noqa: E402
from sluicetest import ROOT, SLUICED, Daemon, free_tcp_port  # noqa: E402

ANCHORS = os.path.join(ROOT, "tests", "anchors", "envoyproxy")


def setUpModule():
    rlsclient.setup()


def tearDownModule():
    rlsclient.teardown()


def wait_for_window(unit_s, need_s):
    """Waits (at most need_s + 1 s) until at least need_s seconds of the
    current calendar window of unit_s seconds are left."""
    left = unit_s - time.time() % unit_s
    if left < need_s:
        time.sleep(left + 0.2)


class RlsDaemon:
    """sluiced serving ShouldRateLimit from a directory of fixture files."""

    def __init__(self, files, env=None, texts=None, args=()):
        self.tmp = tempfile.mkdtemp(prefix="sluice-envoyproxy-")
        self.cfgdir = os.path.join(self.tmp, "config")
        os.mkdir(self.cfgdir)
        for f in files:
            shutil.copy(os.path.join(ANCHORS, f), self.cfgdir)
        self.port = free_tcp_port()
        for name, text in (texts or {}).items():
            with open(os.path.join(self.cfgdir, name), "w") as f:
                f.write(text)
        self.d = Daemon("--grpc", "127.0.0.1:%d" % self.port, "--ratelimit-config", self.cfgdir,
                        *args,
                        tmpdir=self.tmp, env=dict(os.environ, **(env or {})))

    def __enter__(self):
        self.d.start()
        self.chan, self.call = rlsclient.connect(self.port)
        return self

    def __exit__(self, *exc):
        self.chan.close()
        status = self.d.stop()
        log = self.d.logtext()
        self.d.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        assert status == 0, "sluiced exited with %d:\n%s" % (status, log)

    def req(self, domain, *descs, hits=1):
        """descs: lists of (key, value), or dicts {"entries", "limit"}."""
        return self.call(rlsclient.request(domain, *descs, hits=hits), timeout=5)

    def limit(self, domain, entries, **kw):
        """GetLimit as a call: (requests_per_unit, unit) or None."""
        st = self.req(domain, entries, **kw).statuses[0]
        if not st.HasField("current_limit"):
            return None
        return (st.current_limit.requests_per_unit, st.current_limit.unit)


def status(code, rpu, unit, remaining):
    return (code, rpu, unit, remaining)


def got(resp):
    return [(s.code, s.current_limit.requests_per_unit, s.current_limit.unit, s.limit_remaining)
            for s in resp.statuses]


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class ConfigTest(unittest.TestCase):
    """test/config/config_test.go."""

    # upstream's message for each bad file (the part after "FILE: ");
    # sluice adds the line after the file name
    BAD = {
        "bad_limit_unit.yaml": "invalid rate limit unit 'foo'",
        "bad_yaml.yaml": "found unexpected end of stream",
        "duplicate_key.yaml": "duplicate descriptor composite key 'test-domain.key1_value1'",
        "empty_domain.yaml": "config file cannot have empty domain",
        "empty_key.yaml": "descriptor has empty key",
        "misspelled_key.yaml": "config error, unknown key 'ratelimit'",
        "misspelled_key2.yaml": "config error, unknown key 'requestsperunit'",
        "non_map_list.yaml": "config error, yaml file contains list of type other than map",
        "non_string_key.yaml": "config error, key is not of type string: 0.25",
        "replaces_empty.yaml": "should not have an empty replaces entry",
        "replaces_self.yaml": "replaces should not contain name of same descriptor",
        "unlimited_with_unit.yaml": "should not specify rate limit unit when unlimited",
    }

    def refused(self, *files, env=None):
        """files: names in config/, or (name, name in the directory)."""
        tmp = tempfile.mkdtemp(prefix="sluice-envoyproxy-bad-")
        try:
            for f in files:
                src, dst = f if isinstance(f, tuple) else (f, f)
                shutil.copy(os.path.join(ANCHORS, "config", src), os.path.join(tmp, dst))
            p = subprocess.run([SLUICED, "--socket", os.path.join(tmp, "s.sock"), "--grpc",
                                "127.0.0.1:0", "--ratelimit-config", tmp],
                               capture_output=True, text=True, timeout=10,
                               env=dict(os.environ, **(env or {})))
            return p.returncode, p.stdout + p.stderr
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_bad_files_are_refused_with_upstreams_message(self):
        for f, msg in sorted(self.BAD.items()):
            with self.subTest(file=f):
                rc, out = self.refused(f)
                self.assertNotEqual(rc, 0, out)
                self.assertRegex(out, re.escape(f) + r"(:\d+)?: " + re.escape(msg))

    def test_duplicate_domain(self):
        rc, out = self.refused("basic_config.yaml", "duplicate_domain.yaml")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("duplicate domain 'test-domain' in config file", out)

    def test_domain_merge(self):
        """TestDomainMerge: with MERGE_DOMAIN_CONFIG, two files of one domain
        are one domain (without it, a duplicate domain)."""
        R = pb().RateLimitResponse.RateLimit
        files = ["config/merge_domain_key1.yaml", "config/merge_domain_key2.yaml"]
        with RlsDaemon(files, env={"MERGE_DOMAIN_CONFIG": "true"}) as s:
            self.assertIsNone(s.limit("foo_domain", []))
            self.assertIsNone(s.limit("test-domain", []))
            self.assertEqual(s.limit("test-domain", [("key1", "value1")]), (10, R.MINUTE))
            self.assertEqual(s.limit("test-domain", [("key2", "value2")]), (20, R.MINUTE))
        rc, out = self.refused("merge_domain_key1.yaml", "merge_domain_key2.yaml")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("duplicate domain 'test-domain' in config file", out)

    def test_duplicate_key_domain_merge(self):
        """TestDuplicateKeyDomainMerge: one file twice, merged: the second's
        descriptor is a duplicate composite key."""
        rc, out = self.refused("merge_domain_key1.yaml",
                               ("merge_domain_key1.yaml", "merge_domain_key1_again.yaml"),
                               env={"MERGE_DOMAIN_CONFIG": "true"})
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r"merge_domain_key1_again\.yaml(:\d+)?: duplicate descriptor "
                         r"composite key 'test-domain\.key1_value1'")

    def test_basic_config(self):
        R = pb().RateLimitResponse.RateLimit
        with RlsDaemon(["config/basic_config.yaml"]) as s:
            L = s.limit
            self.assertIsNone(L("foo_domain", []))
            self.assertIsNone(L("test-domain", []))
            self.assertIsNone(L("test-domain", [("key1", "something")]))
            self.assertIsNone(L("test-domain", [("key1", "value1")]))
            self.assertIsNone(L("test-domain", [("key2", "value2"), ("subkey", "subvalue")]))
            self.assertIsNone(L("test-domain", [("key5", "value5"), ("subkey5", "subvalue")]))
            self.assertEqual(L("test-domain", [("key1", "value1"), ("subkey1", "something")]),
                             (5, R.SECOND))
            self.assertEqual(L("test-domain", [("key1", "value1"), ("subkey1", "subvalue1")]),
                             (10, R.SECOND))
            self.assertEqual(L("test-domain", [("key2", "something")]), (20, R.MINUTE))
            self.assertEqual(L("test-domain", [("key2", "value2")]), (30, R.MINUTE))
            self.assertIsNone(L("test-domain", [("key2", "value3")]))
            self.assertEqual(L("test-domain", [("key3", "foo")]), (1, R.HOUR))
            st = s.req("test-domain", [("key4", "foo")]).statuses[0]
            self.assertEqual((st.current_limit.requests_per_unit, st.current_limit.unit,
                              st.current_limit.name), (1, R.DAY, "key4_rate_limit"))
            st = s.req("test-domain", [("key6", "foo")]).statuses[0]  # unlimited
            self.assertEqual((st.code, st.HasField("current_limit")), (pb().RateLimitResponse.OK,
                                                                        False))
            self.assertEqual(L("test-domain", [("key7", "unspecified_value")]), (70, R.MINUTE))
            self.assertEqual(L("test-domain", [("key7", "another_value")]), (70, R.MINUTE))

    def test_limit_override(self):
        R = pb().RateLimitResponse.RateLimit
        DAY, HOUR = 4, 3  # envoy.type.v3.RateLimitUnit
        e = [("key1", "value1"), ("subkey1", "something")]
        with RlsDaemon(["config/basic_config.yaml"]) as s:
            # no matching domain: no limit, the override included
            self.assertIsNone(s.limit("foo_domain", {"entries": [], "limit": (10, DAY)}))
            self.assertEqual(s.limit("test-domain", {"entries": e, "limit": (10, DAY)}),
                             (10, R.DAY))
            self.assertEqual(s.limit("test-domain", {"entries": e, "limit": (42, HOUR)}),
                             (42, R.HOUR))
            other = [("key1", "value1"), ("subkey1", "something_else")]
            resp = s.req("test-domain", {"entries": other, "limit": (42, HOUR)})
            self.assertEqual(resp.statuses[0].limit_remaining, 41)  # its own counter

    def test_shadow_mode_config(self):
        R = pb().RateLimitResponse
        U = R.RateLimit
        wait_for_window(60, 5)
        with RlsDaemon(["config/shadowmode_config.yaml"]) as s:
            self.assertEqual(s.limit("test-domain", [("key1", "value1"), ("subkey1", "x")]),
                             (5, U.SECOND))
            self.assertEqual(s.limit("test-domain", [("key2", "value2")]), (30, U.MINUTE))
            # key2 (any value) is in shadow mode: over its 20/min, still OK
            codes = [s.req("test-domain", [("key2", "something")]).overall_code
                     for _ in range(25)]
            self.assertEqual(codes, [R.OK] * 25)
            st = s.req("test-domain", [("key2", "something")]).statuses[0]
            self.assertEqual((st.code, st.limit_remaining), (R.OK, 0))
            # key2_value2 is not: its 30/min refuses the 31st
            codes = [s.req("test-domain", [("key2", "value2")]).overall_code for _ in range(30)]
            self.assertEqual(codes[-1], R.OVER_LIMIT)  # one was spent on the lookup above
            self.assertEqual(codes.count(R.OVER_LIMIT), 1)

    def test_wildcard_config(self):
        R = pb().RateLimitResponse.RateLimit
        with RlsDaemon(["config/wildcard.yaml"]) as s:
            L = lambda *e: s.limit("test-domain", list(e))  # noqa: E731
            self.assertEqual(L(("noVal", "foo1")), (20, R.MINUTE))
            self.assertEqual(L(("wild", "foo1")), (20, R.MINUTE))
            self.assertEqual(L(("wild", "foo2")), (20, R.MINUTE))
            self.assertEqual(L(("nestedWild", "val1"), ("wild", "goo2")), (20, R.MINUTE))
            self.assertIsNone(L(("wild", "bar")))
            self.assertIsNone(L(("noWild", "foo1")))
            self.assertEqual(L(("midWild", "barab")), (20, R.MINUTE))
            self.assertEqual(L(("midWild", "bar123b")), (20, R.MINUTE))
            self.assertEqual(L(("midWild", "barb")), (20, R.MINUTE))
            self.assertIsNone(L(("midWild", "bara")))
            self.assertIsNone(L(("midWild", "xbarb")))
            for v in ("foo123bar456baz", "foobarbaz", "fooXbarYbaz"):
                self.assertEqual(L(("multiWild", v)), (10, R.MINUTE), v)
            for v in ("foo123bar", "bar456baz", "foobazbar"):
                self.assertIsNone(L(("multiWild", v)), v)
            # without share_threshold each value keeps its own counter
            wait_for_window(60, 5)
            a = s.req("test-domain", [("wild", "fooA")]).statuses[0].limit_remaining
            b = s.req("test-domain", [("wild", "fooB")]).statuses[0].limit_remaining
            self.assertEqual((a, b), (19, 19))

    def test_share_threshold_config(self):
        R = pb().RateLimitResponse
        U = R.RateLimit
        wait_for_window(60, 10)
        with RlsDaemon(["config/share_threshold.yaml"]) as s:
            def rem(*e):
                st = s.req("test-domain", list(e)).statuses[0]
                return (st.current_limit.requests_per_unit, st.limit_remaining)
            # values matching files/* share one 100/min counter
            self.assertEqual([rem(("files", "files/%s" % v)) for v in ("a.pdf", "b.csv", "c")],
                             [(100, 99), (100, 98), (100, 97)])
            # nested share_threshold
            self.assertEqual(rem(("nested", "parent"), ("files", "nested/1.txt")), (200, 199))
            self.assertEqual(rem(("nested", "parent"), ("files", "nested/2.txt")), (200, 198))
            self.assertEqual(rem(("files", "top/1"), ("files", "nested/1")), (300, 299))
            self.assertEqual(rem(("files", "top/2"), ("files", "nested/2")), (300, 298))
            # a parent shares, its wildcard child does not: values of the child differ
            self.assertEqual(rem(("path", "path/a"), ("file", "file/1"), ("type", "pdf")),
                             (120, 119))
            self.assertEqual(rem(("path", "path/b"), ("file", "file/2"), ("type", "pdf")),
                             (120, 119))
            self.assertEqual(rem(("path", "path/c"), ("file", "file/1"), ("type", "pdf")),
                             (120, 118))
            self.assertEqual(rem(("user", "user/a"), ("resource", "res/1"), ("action", "r")),
                             (150, 149))
            self.assertEqual(rem(("user", "user/b"), ("resource", "res/2"), ("action", "r")),
                             (150, 148))
            # an explicit value takes precedence and keeps its own counter
            self.assertEqual(rem(("file", "test1")), (50, 49))
            self.assertEqual([rem(("file", v)) for v in ("test2", "test23", "test123")],
                             [(100, 99), (100, 98), (100, 97)])
            self.assertEqual(rem(("file", "test1")), (50, 48))
            # middle and multiple wildcards
            self.assertEqual([rem(("midpath", v)) for v in ("/api/v1", "/api/users/v1")],
                             [(100, 99), (100, 98)])
            self.assertIsNone(s.limit("test-domain", [("midpath", "/api/v2")]))
            self.assertEqual([rem(("multiroute", v)) for v in ("svc1ep2rpc", "svcAepBrpc")],
                             [(50, 49), (50, 48)])
            self.assertEqual(rem(("tenant", "t1prod"), ("resource", "res1v2")), (60, 59))
            self.assertEqual(rem(("tenant", "t2prod"), ("resource", "resXv2")), (60, 58))
            self.assertEqual(U.MINUTE, s.req("test-domain", [("file", "test9")])
                             .statuses[0].current_limit.unit)


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class IntegrationTest(unittest.TestCase):
    """test/integration/integration_test.go, on its runtime/ fixtures."""

    RUNTIME = ["runtime/config/basic.yaml", "runtime/config/another.yaml",
               "runtime/config/share_threshold.yaml"]

    def test_basic_base_config(self):
        R = pb().RateLimitResponse
        U = R.RateLimit
        wait_for_window(60, 8)
        with RlsDaemon(self.RUNTIME) as s:
            resp = s.req("foo", [("hello", "world")])
            self.assertEqual((resp.overall_code, got(resp)), (R.OK, [(R.OK, 0, 0, 0)]))
            resp = s.req("basic", [("key1", "foo")])
            self.assertEqual((resp.overall_code, got(resp)),
                             (R.OK, [status(R.OK, 50, U.SECOND, 49)]))
            # over a minute's limit on a fresh value
            v = str(time.time_ns())
            for i in range(25):
                resp = s.req("another", [("key2", v)])
                code = R.OK if i < 20 else R.OVER_LIMIT
                want = [status(code, 20, U.MINUTE, max(0, 20 - (i + 1)))]
                self.assertEqual((resp.overall_code, got(resp)), (code, want), i)
            # two keys in one domain: every hit counts, refused ones included
            v = str(time.time_ns())
            for i in range(15):
                resp = s.req("another", [("key2", v)], [("key3", v)])
                code = R.OK if i < 10 else R.OVER_LIMIT
                want = [status(R.OK, 20, U.MINUTE, 20 - (i + 1)),
                        status(code, 10, U.HOUR, max(0, 10 - (i + 1)))]
                self.assertEqual((resp.overall_code, got(resp)), (code, want), i)
            # duration_until_reset ticks down
            r1 = s.req("another", [("key4", "durTest")]).statuses[0].duration_until_reset
            time.sleep(2)
            r2 = s.req("another", [("key4", "durTest")]).statuses[0].duration_until_reset
            self.assertLess(r2.seconds, r1.seconds)

    def test_config_reload(self):
        """testConfigReload as upstream runs it: the file is added to and
        removed from the directory, and nothing else is done."""
        self.config_reload(hup=False)

    def test_config_reload_sighup(self):
        """The same, with a SIGHUP after each change (sluice's own way)."""
        self.config_reload(hup=True)

    def config_reload(self, hup):
        R = pb().RateLimitResponse
        U = R.RateLimit
        with RlsDaemon(self.RUNTIME) as s:
            resp = s.req("reload", [("block", "foo")])
            self.assertEqual(got(resp), [(R.OK, 0, 0, 0)])
            shutil.copy(os.path.join(ANCHORS, "runtime", "reload.yaml"), s.cfgdir)
            if hup:
                s.d.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                resp = s.req("reload", [("key1", "foo")])
                if resp.statuses[0].HasField("current_limit"):
                    break
                time.sleep(0.1)
            self.assertEqual(got(resp), [status(R.OK, 50, U.SECOND, 49)])
            # block is 0 per second
            self.assertEqual(s.req("reload", [("block", "foo")]).overall_code, R.OVER_LIMIT)
            os.remove(os.path.join(s.cfgdir, "reload.yaml"))
            if hup:
                s.d.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if not s.req("reload", [("key1", "foo")]).statuses[0].HasField("current_limit"):
                    break
                time.sleep(0.1)
            self.assertEqual(got(s.req("reload", [("block", "foo")])), [(R.OK, 0, 0, 0)])

    def test_share_threshold(self):
        R = pb().RateLimitResponse
        U = R.RateLimit
        wait_for_window(3600, 10)
        with RlsDaemon(self.RUNTIME) as s:
            d = "share-threshold-test"
            for _ in range(10):
                s.req(d, [("files", "files/a.pdf")])
            resp = s.req(d, [("files", "files/b.csv")])
            self.assertEqual((resp.overall_code, got(resp)),
                             (R.OVER_LIMIT, [status(R.OVER_LIMIT, 10, U.HOUR, 0)]))
            base = time.time_ns()
            for i in range(10):
                resp = s.req(d, [("files_no_share", "files_no_share/%d-%d" % (base, i))])
                self.assertEqual((resp.overall_code, got(resp)),
                                 (R.OK, [status(R.OK, 10, U.HOUR, 9)]))


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class HealthTest(unittest.TestCase):
    """test/server/health_test.go's TestGrpcHealthCheck: the gRPC health
    service answers Check for the server ("") and for "ratelimit" (the name
    upstream registers) SERVING while the service runs; an unknown name is
    NOT_FOUND, as grpc-go's health server answers it.  NOT_SERVING while
    the node is not ready (/ready's notion), and with
    HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED while no domain is loaded
    (TestGrpcHealthyWithAtLeastOneConfigLoaded).  Messages are written
    by hand from grpc.health.v1's published definition (field 1: service,
    a string; status, an enum with SERVING = 1)."""

    def test_grpc_health_check(self):
        import grpc
        with RlsDaemon(["examples/example.yaml"]) as s:
            check = s.chan.unary_unary("/grpc.health.v1.Health/Check",
                                       request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
            for name in (b"", b"ratelimit", b"envoy.service.ratelimit.v3.RateLimitService"):
                req = b"\x0a" + bytes([len(name)]) + name if name else b""
                self.assertEqual(check(req, timeout=5), b"\x08\x01", name)
            with self.assertRaises(grpc.RpcError) as e:
                check(b"\x0a\x03foo", timeout=5)
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
            with self.assertRaises(grpc.RpcError) as e:
                check(b"\x0a\x09rate", timeout=5)  # a length past the end
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            # ShouldRateLimit still answers on the same connection
            self.assertEqual(s.req("rl", [("foo", "bar")]).overall_code, pb().RateLimitResponse.OK)

    SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"

    def checker(self, s):
        """Check(service) -> the HealthCheckResponse's bytes, for "" and
        "ratelimit" (which must agree)."""
        check = s.chan.unary_unary("/grpc.health.v1.Health/Check",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)

        def both():
            # Readiness may change between the two calls (a peer joining or
            # leaving): ask again until one pair was answered in one state.
            for _ in range(20):
                a, b = check(b"", timeout=5), check(b"\x0a\x09ratelimit", timeout=5)
                if a == b:
                    return a
                time.sleep(0.05)
            self.assertEqual(a, b)
            return a
        return both

    def test_not_serving_while_not_ready(self):
        # Envoy's and Kubernetes' gRPC probes must not send traffic to a
        # node whose /ready says 503: a clustered node that no seed has
        # answered is NOT_SERVING; once its peer runs, SERVING; the peer
        # killed (a majority lost), NOT_SERVING again, as /ready says
        import urllib.error
        import urllib.request
        import sluicetest

        def ready(port):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/ready" % port, timeout=5) as r:
                    return r.status == 200
            except urllib.error.HTTPError:
                return False

        tmp = tempfile.mkdtemp(prefix="sluice-health-")
        key = os.path.join(tmp, "c.key")
        sluicetest.write_cluster_key(key)
        ga, gb = sluicetest.free_udp_ports(2)
        http = free_tcp_port()
        join = "127.0.0.1:%d,127.0.0.1:%d" % (ga, gb)
        fast = ["--gossip-probe-interval-ms", "200", "--cluster-key-file", key, "--join", join]
        peer = None
        try:
            with RlsDaemon(["examples/example.yaml"],
                           args=["--http", "127.0.0.1:%d" % http, "--node-name", "a",
                                 "--gossip-bind", "127.0.0.1:%d" % ga] + fast) as s:
                check = self.checker(s)
                self.assertFalse(ready(http))
                self.assertEqual(check(), self.NOT_SERVING)
                peer = sluicetest.Daemon("--node-name", "b", "--gossip-bind",
                                         "127.0.0.1:%d" % gb, *fast, tmpdir=tmp,
                                         socket_path=os.path.join(tmp, "b.sock"))
                peer.start()
                sluicetest.wait_until(lambda: check() == self.SERVING, timeout=30,
                                      what="SERVING once the peer answers")
                self.assertTrue(ready(http))
                peer.kill()
                sluicetest.wait_until(lambda: check() == self.NOT_SERVING, timeout=30,
                                      what="NOT_SERVING once the peer is gone")
                self.assertFalse(ready(http))
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http,
                                            timeout=5) as r:
                    metrics = r.read().decode()
                m = re.search(r"^sluice_rls_health_not_serving_total (\d+)", metrics, re.M)
                self.assertTrue(m and int(m.group(1)) >= 2, metrics[-2000:])
        finally:
            if peer is not None:
                if peer.proc is not None and peer.proc.poll() is None:
                    peer.stop()
                peer.close()
            shutil.rmtree(tmp, ignore_errors=True)

    def test_healthy_with_at_least_one_config_loaded(self):
        # TestGrpcHealthyWithAtLeastOneConfigLoaded, through sluiced: with
        # HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true an empty config
        # directory is NOT_SERVING, a file with a domain (the directory is
        # watched) makes it SERVING, and removing it NOT_SERVING again
        import sluicetest
        env = {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}
        with RlsDaemon([], env=env) as s:
            check = self.checker(s)
            self.assertEqual(check(), self.NOT_SERVING)
            path = os.path.join(s.cfgdir, "a.yaml")
            with open(path, "w") as f:
                f.write("domain: a\n")
            sluicetest.wait_until(lambda: check() == self.SERVING, timeout=10,
                                  what="SERVING once a domain is loaded")
            os.unlink(path)
            sluicetest.wait_until(lambda: check() == self.NOT_SERVING, timeout=10,
                                  what="NOT_SERVING once no domain is loaded")
        # without the variable, an empty directory serves (upstream's default)
        with RlsDaemon([]) as s:
            self.assertEqual(self.checker(s)(), self.SERVING)

    def watcher(self, s):
        return s.chan.unary_stream("/grpc.health.v1.Health/Watch",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)

    def test_grpc_health_watch(self):
        # grpc.health.v1.Health/Watch as health.proto defines it: the first
        # message is the status now, then one each time it changes (here a
        # domain loaded and removed under
        # HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), for "" and "ratelimit";
        # an unknown name hears SERVICE_UNKNOWN (3) and the call stays open
        import grpc
        import sluicetest
        env = {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}
        with RlsDaemon([], env=env) as s:
            watch = self.watcher(s)
            calls = [watch(b"", timeout=60), watch(b"\x0a\x09ratelimit", timeout=60)]
            unknown = watch(b"\x0a\x03foo", timeout=60)
            for c in calls:
                self.assertEqual(next(c), self.NOT_SERVING)
            self.assertEqual(next(unknown), b"\x08\x03")
            path = os.path.join(s.cfgdir, "a.yaml")
            with open(path, "w") as f:
                f.write("domain: a\n")
            for c in calls:
                self.assertEqual(next(c), self.SERVING)
            os.unlink(path)
            for c in calls:
                self.assertEqual(next(c), self.NOT_SERVING)
            self.assertFalse(unknown.done())
            # A malformed request is refused, as Check refuses it.
            with self.assertRaises(grpc.RpcError) as e:
                next(watch(b"\x0a\x09rate", timeout=5))
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            # ShouldRateLimit and Check still answer beside the open watches.
            self.assertEqual(s.req("a", [("k", "v")]).overall_code, pb().RateLimitResponse.OK)
            self.assertEqual(self.checker(s)(), self.NOT_SERVING)
            # grpc-timeout ends a watch with DEADLINE_EXCEEDED.
            short = watch(b"", timeout=1)
            self.assertEqual(next(short), self.NOT_SERVING)
            with self.assertRaises(grpc.RpcError) as e:
                next(short)
            self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            for c in calls + [unknown]:
                c.cancel()
            sluicetest.wait_until(lambda: "grpc_health_watching:0" in s.d.info("listeners"),
                                  timeout=10, what="the cancelled watches closed")

    def test_grpc_health_watch_bounded(self):
        # At most 16 watches on one connection: the 17th is refused with
        # RESOURCE_EXHAUSTED, and a cancelled one frees its place.
        import grpc
        with RlsDaemon(["examples/example.yaml"]) as s:
            watch = self.watcher(s)
            calls = [watch(b"", timeout=60) for _ in range(16)]
            for c in calls:
                self.assertEqual(next(c), self.SERVING)
            with self.assertRaises(grpc.RpcError) as e:
                next(watch(b"", timeout=5))
            self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            calls.pop().cancel()
            ok = None
            for _ in range(50):
                try:
                    ok = watch(b"", timeout=60)
                    self.assertEqual(next(ok), self.SERVING)
                    break
                except grpc.RpcError:
                    ok = None
                    time.sleep(0.1)
            self.assertIsNotNone(ok, "a watch after one was cancelled")
            for c in calls + [ok]:
                c.cancel()


# TestDetailedMetric's realisticExampleConfig (test/config/config_test.go),
# as the YAML it stands for.
DETAILED_YAML = """domain: nested
descriptors:
  - key: key_1
    rate_limit: {requests_per_unit: 500, unit: minute}
    detailed_metric: true
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {requests_per_unit: 500, unit: minute}
  - key: key_2
    rate_limit: {requests_per_unit: 5000, unit: minute}
    detailed_metric: true
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        rate_limit: {requests_per_unit: 5, unit: minute}
        detailed_metric: true
  - key: key_2
    value: specific-id
    rate_limit: {requests_per_unit: 50000, unit: minute}
    detailed_metric: true
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        rate_limit: {requests_per_unit: 100, unit: minute}
        detailed_metric: true
"""


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class DetailedMetricTest(unittest.TestCase):
    """TestDetailedMetric's stats keys, read from /metrics: a limit with
    detailed_metric counts under the request's own key_value path, one
    without under its config key; the series are bounded (256, then
    _other)."""

    def series(self, http_port):
        import urllib.request
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=5) as r:
            text = r.read().decode()
        out = {}
        for m in re.finditer(r'^sluice_rls_descriptor_(\w+)_total\{key="([^"]*)"\} (\d+)$', text,
                             re.M):
            out.setdefault(m.group(2), {})[m.group(1)] = int(m.group(3))
        return out

    def test_detailed_metric_keys(self):
        wait_for_window(60, 10)
        http = free_tcp_port()
        with RlsDaemon([], texts={"nested.yaml": DETAILED_YAML},
                       args=("--http", "127.0.0.1:%d" % http)) as s:
            cases = [
                # upstream's three realisticExampleConfig cases
                ([("key_1", "value-for-key-1")], "nested.key_1_value-for-key-1"),
                ([("key_2", "key-2-value")], "nested.key_2_key-2-value"),
                ([("key_2", "key-2-value"), ("key_3", "requested-key3-value")],
                 "nested.key_2_key-2-value.key_3_requested-key3-value"),
                # without detailed_metric: the limit's config key
                ([("key_1", "some-value-for-key-1")], "nested.key_1_some-value-for-key-1"),
            ]
            for entries, key in cases:
                s.req("nested", entries)
            got = self.series(http)
            for entries, key in cases:
                self.assertEqual(got.get(key), {"hits": 1, "over_limit": 0, "within_limit": 1,
                                                "shadow_mode": 0}, (key, sorted(got)))
            # over the limit (5/min): counted as over
            for _ in range(6):
                s.req("nested", [("key_2", "x"), ("key_3", "requested-key3-value")])
            self.assertEqual(self.series(http)["nested.key_2_x.key_3_requested-key3-value"],
                             {"hits": 6, "over_limit": 1, "within_limit": 5, "shadow_mode": 0})
            # bounded: 300 more values make 256 series and _other in all
            for i in range(300):
                s.req("nested", [("key_1", "v%d" % i)])
            got = self.series(http)
            self.assertEqual(len(got), 257)
            self.assertIn("_other", got)
            self.assertEqual(sum(v["hits"] for v in got.values()), 4 + 6 + 300)


# The limits of upstream's quota service tests (regular 5/min, quota 3/min
# in quota mode; a second quota descriptor of 5/min).
QUOTA_YAML = """domain: quota-domain
descriptors:
  - key: regular
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: quota
    value: big
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class QuotaModeTest(unittest.TestCase):
    """test/service/ratelimit_test.go's quota_mode cases: a quota-mode
    descriptor over its limit refuses only when every quota-mode descriptor
    of the request is over; each status still says OVER_LIMIT."""

    REG, QUOTA, BIG = [("regular", "limit")], [("quota", "limit")], [("quota", "big")]

    def run_case(self, fill, ask, env=None):
        """fill: {descriptor name: hits before the call}; returns the answer
        to one call with the descriptors in ask."""
        wait_for_window(60, 10)
        with RlsDaemon([], env=env, texts={"quota.yaml": QUOTA_YAML}) as s:
            for desc, n in fill:
                for _ in range(n):
                    s.req("quota-domain", desc)
            return s.req("quota-domain", *ask)

    def codes(self, resp):
        return (resp.overall_code, [st.code for st in resp.statuses])

    def test_per_descriptor_quota_mode(self):
        R = pb().RateLimitResponse
        resp = self.run_case([(self.REG, 5)], [self.REG, self.QUOTA])
        self.assertEqual(self.codes(resp), (R.OVER_LIMIT, [R.OVER_LIMIT, R.OK]))

    def test_mixed_per_descriptor_modes(self):
        R = pb().RateLimitResponse
        resp = self.run_case([(self.QUOTA, 3)], [self.REG, self.QUOTA])
        self.assertEqual(self.codes(resp), (R.OVER_LIMIT, [R.OK, R.OVER_LIMIT]))

    def test_mixed_per_descriptor_modes_under_limit(self):
        R = pb().RateLimitResponse
        resp = self.run_case([], [self.REG, self.QUOTA])
        self.assertEqual(self.codes(resp), (R.OK, [R.OK, R.OK]))

    def test_quota_mode_only_all_over_the_limit(self):
        R = pb().RateLimitResponse
        resp = self.run_case([(self.BIG, 5), (self.QUOTA, 3)], [self.BIG, self.QUOTA])
        self.assertEqual(self.codes(resp), (R.OVER_LIMIT, [R.OVER_LIMIT, R.OVER_LIMIT]))

    def test_quota_mode_only_some_over_the_limit(self):
        R = pb().RateLimitResponse
        resp = self.run_case([(self.BIG, 5)], [self.BIG, self.QUOTA])
        self.assertEqual(self.codes(resp), (R.OK, [R.OVER_LIMIT, R.OK]))

    def test_global_quota_mode(self):
        # QUOTA_MODE=true: the regular limit counts as a quota one too
        R = pb().RateLimitResponse
        env = {"QUOTA_MODE": "true"}
        resp = self.run_case([(self.REG, 5)], [self.REG, self.QUOTA], env=env)
        self.assertEqual(self.codes(resp), (R.OK, [R.OVER_LIMIT, R.OK]))
        resp = self.run_case([(self.REG, 5), (self.QUOTA, 3)], [self.REG, self.QUOTA], env=env)
        self.assertEqual(self.codes(resp), (R.OVER_LIMIT, [R.OVER_LIMIT, R.OVER_LIMIT]))

    def test_quota_mode_with_shadow_mode(self):
        # SHADOW_MODE=true: every quota descriptor over, answered OK overall
        R = pb().RateLimitResponse
        resp = self.run_case([(self.BIG, 5), (self.QUOTA, 3)], [self.BIG, self.QUOTA],
                             env={"SHADOW_MODE": "true"})
        self.assertEqual(self.codes(resp), (R.OK, [R.OVER_LIMIT, R.OVER_LIMIT]))


# test/service/ratelimit_test.go's TestMetadata* cases, the limits they
# mock written as the YAML they stand for (one domain per case): QUOTA_MODE
# and RESPONSE_DYNAMIC_METADATA are on in each, as there.
METADATA_CASES = {
    # TestMetadataReturnedForPassedDescriptors: regular (10/min) passes,
    # quota (5/min, quota_mode) is over: only regular's metadata
    "passed": """domain: quota-domain
descriptors:
  - key: regular
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: service_1}
  - key: quota
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_2}
""",
    # TestMetadataReturnedForAllPassedDescriptors: both pass, both given
    "all": """domain: quota-domain
descriptors:
  - key: regular
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: service_1}
  - key: quota
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {some_other_name: service_2}
""",
    # TestOverlappingMetadataReturnsTheFirstValue: both pass, one name
    "overlap": """domain: quota-domain
descriptors:
  - key: regular
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: service_1}
  - key: quota
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {name: service_2}
""",
}


def metadata_of(resp):
    """The answer's dynamic_metadata as plain Python values (Struct ->
    dict, ListValue -> list, numbers as floats), or None when absent."""
    if not resp.HasField("dynamic_metadata"):
        return None
    from google.protobuf import json_format
    return json_format.MessageToDict(resp.dynamic_metadata)


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class DynamicMetadataTest(unittest.TestCase):
    """RESPONSE_DYNAMIC_METADATA=true: every answer's dynamic_metadata (a
    google.protobuf.Struct, decoded here by protobuf's own Python library)
    echoes the request and merges the `metadata` of the limits that passed,
    as src/service/ratelimit.go's ratelimitToMetadata builds it."""

    ON = {"RESPONSE_DYNAMIC_METADATA": "true"}
    REG, QUOTA = [("regular", "limit")], [("quota", "limit")]

    def run_case(self, name, fill=()):
        wait_for_window(60, 10)
        env = dict(self.ON, QUOTA_MODE="true")
        with RlsDaemon([], env=env, texts={"m.yaml": METADATA_CASES[name]}) as s:
            for desc, n in fill:
                for _ in range(n):
                    s.req("quota-domain", desc)
            return s.req("quota-domain", self.REG, self.QUOTA)

    def test_metadata_returned_for_passed_descriptors(self):
        R = pb().RateLimitResponse
        resp = self.run_case("passed", [(self.QUOTA, 5)])
        self.assertEqual((resp.overall_code, [st.code for st in resp.statuses]),
                         (R.OK, [R.OK, R.OVER_LIMIT]))
        self.assertEqual(metadata_of(resp)["metadata"], {"name": "service_1"})

    def test_metadata_returned_for_all_passed_descriptors(self):
        resp = self.run_case("all")
        self.assertEqual(resp.overall_code, pb().RateLimitResponse.OK)
        self.assertEqual(metadata_of(resp)["metadata"],
                         {"name": "service_1", "some_other_name": "service_2"})

    def test_overlapping_metadata_returns_the_first_value(self):
        resp = self.run_case("overlap")
        self.assertEqual(metadata_of(resp)["metadata"], {"name": "service_1"})

    def test_metadata_config(self):
        # TestMetadata (test/config/config_test.go, metadata.yaml): the
        # limit found carries its descriptor's metadata; here it comes back
        # in the answer
        with RlsDaemon(["config/metadata.yaml"], env=self.ON) as s:
            md = metadata_of(s.req("test-domain", [("key1", "value1"), ("subkey1", "something")]))
            self.assertEqual(md["metadata"], {"name": "service_1"})
            md = metadata_of(s.req("test-domain", [("key2", "something")]))
            self.assertEqual(md["metadata"], {"service_with_quota": {"name": "service_2"}})
            # the subvalue1 limit has no metadata of its own
            md = metadata_of(s.req("test-domain", [("key1", "value1"), ("subkey1", "subvalue1")]))
            self.assertNotIn("metadata", md)

    def test_request_echoed(self):
        # ratelimitToMetadata's other fields: the domain, each descriptor's
        # "KEY=VALUE" entries, its override as text and its hits_addend,
        # and the request's hits_addend when not 0
        with RlsDaemon(["config/metadata.yaml"], env=self.ON) as s:
            resp = s.req("test-domain", [("key2", "a"), ("x", "y")],
                         {"entries": [("key1", "value1")], "limit": (42, 3), "hits": 0},
                         hits=3)
            self.assertEqual(metadata_of(resp), {
                "domain": "test-domain",
                "descriptors": [
                    {"entries": ["key2=a", "x=y"]},
                    {"entries": ["key1=value1"], "limit": "requests_per_unit:42 unit:HOUR",
                     "hitsAddend": 0.0},
                ],
                "hitsAddend": 3.0,
            })
            # an over-limit descriptor gives no metadata; the others still do
            for _ in range(20):
                s.req("test-domain", [("key2", "b")])
            resp = s.req("test-domain", [("key2", "b")],
                         [("key1", "value1"), ("subkey1", "z")], hits=1)
            R = pb().RateLimitResponse
            self.assertEqual([st.code for st in resp.statuses], [R.OVER_LIMIT, R.OK])
            self.assertEqual(metadata_of(resp)["metadata"], {"name": "service_1"})

    def test_off_by_default(self):
        with RlsDaemon(["config/metadata.yaml"]) as s:
            resp = s.req("test-domain", [("key2", "a")])
            self.assertEqual(resp.overall_code, pb().RateLimitResponse.OK)
            self.assertIsNone(metadata_of(resp))


# examples/envoy/proxy.yaml: each route's rate_limits, each a list of
# (header, descriptor_key) request_headers actions.  Envoy sends one
# descriptor per rate limit whose headers are all present.
ROUTES = {
    "/header": [[("foo", "foo")]],
    "/twoheader": [[("foo", "foo"), ("bar", "bar")], [("foo", "foo"), ("baz", "baz")]],
    "/fourheader": [[("foo", "foo"), ("bar", "bar")],
                    [("source_cluster", "source_cluster"),
                     ("destination_cluster", "destination_cluster")]],
    "/fiveheader": [[("foo", "foo"), ("bar", "bar")],
                    [("source_cluster", "source_cluster"),
                     ("destination_cluster", "destination_cluster")],
                    [("category", "category")]],
    "/unspec": [[("unspec", "unspec")]],
}
# The routes whose rate limits are generic keys: (descriptor entries,
# hits_addend or None, on the response path) of each.
GENERIC = {
    "/quota": [([("service", "service_1")], None, False),
               ([("service", "service_2")], None, False)],
    "/tokenquota": [([("service", "service_2")], 0, False),
                    ([("service", "service_2")], 1, True)],
}


def descriptors(path, headers):
    out = []
    for actions in ROUTES[path]:
        if all(h in headers for h, _ in actions):
            out.append([(k, headers[h]) for h, k in actions])
    return out


CURL = re.compile(r'curl .*?((?:-H "[^"]*" )*)http://envoy-proxy:8888(/\w+)')


def curls(script):
    """(path, headers) of every curl line of an upstream script, in order,
    with the assert_ok / assert_limited that follows it (None if none)."""
    with open(os.path.join(ANCHORS, "scripts", script)) as f:
        lines = f.read().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = CURL.search(line)
        if not m:
            continue
        headers = dict(h.split(": ", 1) for h in re.findall(r'-H "([^"]*)"', m.group(1)))
        expect = None
        for nxt in lines[i + 1:i + 3]:
            if nxt.strip() in ("assert_ok", "assert_limited"):
                expect = nxt.strip()
        out.append((m.group(2), headers, expect))
    return out


@unittest.skipUnless(HAVE_GRPC, "python3-grpcio / python3-grpc-tools are not installed")
class ScriptsTest(unittest.TestCase):
    """integration-test/scripts/*.sh on examples/ratelimit/config."""

    def setUp(self):
        wait_for_window(60, 10)
        # as integration-test/docker-compose-integration-test.yml runs it
        self.s = RlsDaemon(["examples/example.yaml", "examples/config.yaml"],
                           env={"RESPONSE_DYNAMIC_METADATA": "true"}).__enter__()

    def tearDown(self):
        self.s.__exit__(None, None, None)

    def get(self, path, headers):
        """What Envoy answers a request: 200, or 429 when any descriptor is over."""
        descs = descriptors(path, headers)
        if not descs:
            return 200
        resp = self.s.req("rl", *descs)
        return 429 if resp.overall_code == pb().RateLimitResponse.OVER_LIMIT else 200

    def get_generic(self, path):
        """A generic-key route as Envoy runs it: one call with the request
        path's descriptors; 429 if it says OVER_LIMIT, else the response
        path's descriptors are charged in a second call (apply_on_stream_done)."""
        R = pb().RateLimitResponse
        for done in (False, True):
            descs = [dict({"entries": e}, **({} if h is None else {"hits": h}))
                     for e, h, on_done in GENERIC[path] if on_done == done]
            if not descs:
                continue
            resp = self.s.req("rl", *descs)
            if not done and resp.overall_code == R.OVER_LIMIT:
                return 429
        return 200

    def get_multiservice(self):
        """/multiservice-tokenquota as Envoy runs it: the request path looks
        at service_1 and service_2 with 0 hits; 429 if the answer says
        OVER_LIMIT; else the route's header takes
        %DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:
        service_with_quota:name)%, the load balancer picks that service,
        and the response path charges 1 hit to the locality that served
        (the service's name).  Returns 429 or the service's name."""
        R = pb().RateLimitResponse
        resp = self.s.req("rl", {"entries": [("service", "service_1")], "hits": 0},
                          {"entries": [("service", "service_2")], "hits": 0})
        if resp.overall_code == R.OVER_LIMIT:
            return 429
        name = metadata_of(resp)["metadata"]["service_with_quota"]["name"]
        self.s.req("rl", {"entries": [("service", name)], "hits": 1})
        return name

    def test_multiservice_token_quota(self):
        # multiservice-tokenquota.sh up to its one-minute sleep: each curl's
        # grep says which service must answer ("from Service N"), or, for
        # "Hello World from Service" followed by `if [ $? -eq 0 ]`, that the
        # request must be refused
        with open(os.path.join(ANCHORS, "scripts", "multiservice-tokenquota.sh")) as f:
            text = f.read().split("sleep 60")[0]
        want = []
        for line in text.splitlines():
            m = re.search(r'curl .*/multiservice-tokenquota \| grep "([^"]*)"', line)
            if m:
                n = re.search(r"from Service (\d)$", m.group(1))
                want.append("service_" + n.group(1) if n else 429)
        self.assertEqual(want, ["service_1", "service_1", "service_2", "service_2",
                                "service_2", 429])
        self.assertEqual([self.get_multiservice() for _ in want], want)

    def test_quota(self):
        # quota.sh: service_1 (1/min) and service_2 (2/min), both quota_mode
        steps = curls("quota.sh")
        self.assertEqual([p for p, _, _ in steps], ["/quota"] * 4)
        self.assertEqual([self.get_generic(p) for p, _, _ in steps[:3]], [200, 200, 429])

    def test_token_quota(self):
        # token-quota.sh: service_2 looked at with 0 hits, charged 1 after
        steps = curls("token-quota.sh")
        self.assertEqual([p for p, _, _ in steps], ["/tokenquota"] * 5)
        self.assertEqual([self.get_generic(p) for p, _, _ in steps[:4]], [200, 200, 200, 429])

    def test_replaces(self):
        steps = curls("replaces.sh")
        self.assertGreater(len(steps), 20)
        for n, (path, headers, expect) in enumerate(steps):
            want = 429 if expect == "assert_limited" else 200
            self.assertEqual(self.get(path, headers), want, (n, path, headers))

    def test_simple_get(self):
        ((path, headers, _),) = curls("simple-get.sh")
        self.assertEqual(self.get(path, headers), 200)

    def test_trigger_ratelimit(self):
        steps = curls("trigger-ratelimit.sh")
        self.assertEqual([self.get(p, h) for p, h, _ in steps], [200, 200, 200, 429, 429])

    def test_trigger_shadow_mode_key(self):
        steps = curls("trigger-shadow-mode-key.sh")
        self.assertEqual([self.get(p, h) for p, h, _ in steps], [200] * len(steps))

    def test_value_included_when_unspecified(self):
        steps = curls("value-included-in-stats-key-when-unspecified.sh")
        self.assertEqual([self.get(p, h) for p, h, _ in steps], [200, 200, 429])


if __name__ == "__main__":
    unittest.main()
