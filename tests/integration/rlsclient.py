"""Envoy's rate limit service from Python, for the tests: the client
generated from the same .proto files sluiced is built from (Debian's
python3-grpcio and python3-grpc-tools), and the few calls the tests make.

    import rlsclient
    def setUpModule(): rlsclient.setup()        # generates the client, once
    def tearDownModule(): rlsclient.teardown()
    chan, call = rlsclient.connect(port)        # a ready channel, ShouldRateLimit
    call(rlsclient.request("app", [("user", "u1")], hits=1), timeout=5)
    rlsclient.call_once(port)                   # a fresh channel, overall_code

HAVE_GRPC is False when the packages are missing: tests skip then, and
setup() does nothing.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROTO_DIR = os.path.join(ROOT, "node", "rls", "proto")
PROTOS = ["envoy/service/ratelimit/v3/rls.proto",
          "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
          "envoy/type/v3/ratelimit_unit.proto",
          "envoy/config/core/v3/base.proto"]
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

try:
    import grpc  # Debian python3-grpcio
    import grpc_tools  # noqa: F401  Debian python3-grpc-tools
    HAVE_GRPC = True
except ImportError:
    HAVE_GRPC = False

_gen = None
_pb = None


def setup():
    """Generates the Python client into a scratch directory (once per
    process) and imports it; returns HAVE_GRPC."""
    global _gen, _pb
    if not HAVE_GRPC or _pb is not None:
        return HAVE_GRPC
    _gen = tempfile.mkdtemp(prefix="sluice-rls-gen-")
    subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I", PROTO_DIR,
                    "--python_out", _gen, "--grpc_python_out", _gen] + PROTOS, check=True)
    sys.path.insert(0, _gen)
    from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402
    _pb = rls_pb2
    return True


def teardown():
    global _gen
    if _gen is not None:
        shutil.rmtree(_gen, ignore_errors=True)
        _gen = None


def pb():
    """The generated rls_pb2 module (after setup())."""
    return _pb


def connect(port, ready_timeout=10):
    """(channel, ShouldRateLimit callable) on a channel that is ready; the
    caller closes the channel."""
    chan = grpc.insecure_channel("127.0.0.1:%d" % port)
    grpc.channel_ready_future(chan).result(timeout=ready_timeout)
    return chan, method(chan)


def method(chan, name=METHOD):
    """ShouldRateLimit (or another method name) on chan, messages in and out."""
    return chan.unary_unary(name, request_serializer=_pb.RateLimitRequest.SerializeToString,
                            response_deserializer=_pb.RateLimitResponse.FromString)


def request(domain, *descs, hits=1):
    """A RateLimitRequest; descs are lists of (key, value), or dicts with
    "entries" and optionally "limit" (requests_per_unit, unit) and "hits"
    (the descriptor's hits_addend)."""
    r = _pb.RateLimitRequest(domain=domain, hits_addend=hits)
    for d in descs:
        p = r.descriptors.add()
        entries = d["entries"] if isinstance(d, dict) else d
        for k, v in entries:
            e = p.entries.add()
            e.key, e.value = k, v
        if isinstance(d, dict):
            if "limit" in d:
                p.limit.requests_per_unit, p.limit.unit = d["limit"]
            if "hits" in d:
                p.hits_addend.value = d["hits"]
    return r


def call_once(port, timeout=5.0, domain="app", entries=(("user", "u1"),)):
    """One ShouldRateLimit (one hit) on a fresh channel; its overall_code."""
    chan = grpc.insecure_channel("127.0.0.1:%d" % port)
    try:
        return method(chan)(request(domain, list(entries), hits=1),
                            timeout=timeout).overall_code
    finally:
        chan.close()
