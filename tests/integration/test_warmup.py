"""The warmup algorithm over the socket of a real sluiced: a policy from
the config file (algorithm = warmup, warmup, cold_factor), the inline
ALGO warmup spec, SL.ACQUIRE waiting out the cold cost, and the refusals
(global scope, WARMUP on another algorithm)."""
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import Daemon  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)

CONF = """[policy cache]
algorithm = warmup
rate = 20 per 1s
warmup = 4s
cold_factor = 4
"""


class Warmup(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-warmup-")
        self.conf = os.path.join(self.dir.name, "sluice.conf")
        with open(self.conf, "w") as f:
            f.write(CONF)

    def tearDown(self):
        self.dir.cleanup()

    def test_policy_cold_then_warm(self):
        with Daemon("--config", self.conf) as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            # From cold the first unit passes and costs cold_factor stable
            # intervals: 4 x 50 ms, so the next is refused for about 200 ms.
            first = r.execute_command("SL.THROTTLE", "k", "POLICY", "cache")
            self.assertEqual(first[0], 0, first)
            second = r.execute_command("SL.THROTTLE", "k", "POLICY", "cache")
            self.assertEqual(second[0], 1, second)
            self.assertTrue(150 <= second[3] <= 200, second)  # retry after, ms
            # The policy shows its algorithm.
            pols = r.execute_command("SL.POLICIES")
            self.assertIn(b"warmup", pols[0])
            # SL.ACQUIRE waits out the cold cost instead of refusing.
            t0 = time.monotonic()
            got = r.execute_command("SL.ACQUIRE", "k", "POLICY", "cache", "TIMEOUT", 2000)
            waited = time.monotonic() - t0
            self.assertEqual(got[0], 0, got)
            self.assertTrue(0.1 <= waited <= 1.5, waited)
            self.assertTrue(100 <= got[5] <= 1500, got)  # waited_ms
            r.close()

    def test_inline_spec_and_refusals(self):
        with Daemon() as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            spec = ["ALGO", "warmup", "RATE", 10, 1000, "WARMUP", 2000, "COLD", 5]
            self.assertEqual(r.execute_command("SL.THROTTLE", "i", *spec)[0], 0)
            again = r.execute_command("SL.THROTTLE", "i", *spec)
            self.assertEqual(again[0], 1)
            self.assertTrue(400 <= again[3] <= 500, again)  # 5 x 100 ms, cold
            with self.assertRaises(redis.ResponseError) as cm:
                r.execute_command("SL.THROTTLE", "i", *spec, "SCOPE", "global")
            self.assertIn("warmup cannot be global", str(cm.exception))
            with self.assertRaises(redis.ResponseError) as cm:
                r.execute_command("SL.THROTTLE", "i", "ALGO", "gcra", "RATE", 1, 1, "WARMUP", 5)
            self.assertIn("warmup only", str(cm.exception))
            with self.assertRaises(redis.ResponseError) as cm:
                r.execute_command("SL.THROTTLE", "i", "ALGO", "warmup", "RATE", 1, 1, "COLD", 0)
            self.assertIn("COLD", str(cm.exception))
            r.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
