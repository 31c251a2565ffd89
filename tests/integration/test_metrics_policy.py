"""Per-policy decision counters and the decision latency histogram of a
real sluiced: the counters move by what clients did under each policy
(CL.THROTTLE over a policy's prefix, SL.THROTTLE POLICY, SL.MULTI), keep
their values across a reload that keeps the policy, and the histogram
counts one decision in 16."""
import os
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import Daemon, free_tcp_port  # noqa: E402
from test_metrics import parse_exposition  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)

CONF = """[policy api]
algorithm = gcra
burst = 2
rate = 1 per 1h
match = api:

[policy login]
algorithm = fixed-window
rate = 100 per 1h
"""


class PolicyMetrics(unittest.TestCase):
    def test_counts_reload_and_latency(self):
        port = free_tcp_port()
        with tempfile.TemporaryDirectory(prefix="sluice-pm-") as tmp:
            conf = os.path.join(tmp, "sluice.conf")
            with open(conf, "w") as f:
                f.write(CONF)
            with Daemon("--config", conf, "--http", "127.0.0.1:%d" % port) as d:
                r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)

                def scrape():
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                                timeout=10) as resp:
                        return parse_exposition(resp.read().decode())

                # 5 on api:x under the api policy (burst 2: 3 allowed, 2 limited),
                # the inline limit ignored as the policy's prefix covers the key.
                for _ in range(5):
                    r.execute_command("CL.THROTTLE", "api:x", 100, 100, 1)
                for _ in range(4):
                    r.execute_command("SL.THROTTLE", "u1", "POLICY", "login")
                r.execute_command("SL.MULTI", "KEY", "u2", "POLICY", "login",
                                  "KEY", "api:y", "POLICY", "api")
                # Peeks decide nothing and count nothing.
                r.execute_command("SL.PEEK", "u1", "POLICY", "login")
                m = scrape()
                dec = 'sluice_policy_decisions_total{policy="%s"}'
                lim = 'sluice_policy_limited_total{policy="%s"}'
                self.assertEqual(m[dec % "api"], 6)
                self.assertEqual(m[lim % "api"], 2)
                self.assertEqual(m[dec % "login"], 5)
                self.assertEqual(m[lim % "login"], 0)

                # A reload that keeps both (and adds one) keeps their counts.
                with open(conf, "a") as f:
                    f.write("\n[policy extra]\nalgorithm = gcra\nburst = 1\nrate = 1 per 1s\n")
                self.assertEqual(r.execute_command("SL.RELOAD"), b"OK")
                m = scrape()
                self.assertEqual(m[dec % "api"], 6)
                self.assertEqual(m[dec % "login"], 5)
                self.assertEqual(m[dec % "extra"], 0)

                # 320 more decisions: one in 16 is timed, so at least 20 more
                # observations, every bucket cumulative and ending at the count.
                before = m["sluice_decision_duration_seconds_count"]
                for _ in range(320):
                    r.execute_command("CL.THROTTLE", "lat", 1000, 1000, 1)
                m = scrape()
                count = m["sluice_decision_duration_seconds_count"]
                self.assertGreaterEqual(count - before, 20)
                inf = m['sluice_decision_duration_seconds_bucket{le="+Inf"}']
                self.assertEqual(inf, count)
                buckets = sorted((float(k.split('"')[1]), v) for k, v in m.items()
                                 if k.startswith("sluice_decision_duration_seconds_bucket")
                                 and "+Inf" not in k)
                values = [v for _, v in buckets]
                self.assertEqual(values, sorted(values))
                self.assertGreater(m["sluice_decision_duration_seconds_sum"], 0)
                r.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
