"""--max-keys bounds local and global keys apart, each up to N, and INFO and
/metrics count refusals of either in overflow_denied (--on-full deny).

One clustered sluiced (a cluster of one, on 127.0.0.1) with --max-keys 4:
four local keys and four global keys are all admitted and held; a fifth of
each is refused; INFO limiter's overflow_denied and /metrics'
sluice_overflow_denied_total both say 2."""
import os
import re
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402

import redis  # noqa: E402

SPEC = ["ALGO", "gcra", "BURST", "9", "RATE", "10", "3600000"]  # nothing drains


def main():
    udp = sluicetest.free_udp_ports(1)[0]
    http = sluicetest.free_tcp_port()
    d = sluicetest.Daemon("--max-keys", "4", "--on-full", "deny",
                          "--http", "127.0.0.1:%d" % http,
                          "--node-name", "solo", "--gossip-bind", "127.0.0.1:%d" % udp,
                          "--insecure-no-encryption")
    with d:
        r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
        sluicetest.wait_until(lambda: r.info("cluster").get("synced") == "yes", 20,
                              "the node to be synced", interval=0.1)
        for i in range(4):
            assert r.execute_command("SL.THROTTLE", "l%d" % i, *SPEC, "SCOPE", "local")[0] == 0
            assert r.execute_command("SL.THROTTLE", "g%d" % i, *SPEC, "SCOPE", "global")[0] == 0
        # Each table is full: a new key of either scope is refused.
        assert r.execute_command("SL.THROTTLE", "l4", *SPEC, "SCOPE", "local")[0] == 1
        assert r.execute_command("SL.THROTTLE", "g4", *SPEC, "SCOPE", "global")[0] == 1
        # Held keys are still decided.
        assert r.execute_command("SL.THROTTLE", "l0", *SPEC, "SCOPE", "local")[0] == 0
        assert r.execute_command("SL.THROTTLE", "g0", *SPEC, "SCOPE", "global")[0] == 0
        info = r.info("limiter")
        assert info["overflow_denied"] == 2, info
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http, timeout=5) as f:
            text = f.read().decode()
        m = re.search(r"^sluice_overflow_denied_total (\d+)", text, re.M)
        assert m and int(m.group(1)) == 2, m
        print("ok: --max-keys 4 held 4 local and 4 global keys; the fifth of each refused; "
              "INFO and /metrics overflow_denied 2")
        r.close()


if __name__ == "__main__":
    main()
