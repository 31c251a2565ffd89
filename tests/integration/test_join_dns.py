"""A --join name that does not resolve is said in the log (once a minute at
most, with the names), instead of leaving a node alone in silence; the node
keeps running and answering."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)


def main():
    port = sluicetest.free_udp_ports(1)[0]
    # .invalid never resolves (RFC 6761), whatever the machine's resolver.
    join = "seed-a.invalid:7946,seed-b.invalid:7946"
    d = sluicetest.Daemon("--gossip-bind", "127.0.0.1:%d" % port, "--insecure-no-encryption",
                          "--node-name", "lonely", "--join", join, "--dns-interval-ms", "200")
    with d:
        deadline = time.monotonic() + 20
        line = None
        while time.monotonic() < deadline and line is None:
            for ln in d.logtext().splitlines():
                if "lookups of the --join names failed" in ln:
                    line = ln
            time.sleep(0.1)
        assert line is not None, "no log line about the failed lookups:\n" + d.logtext()
        assert join in line, line
        # Re-resolution goes on every 200 ms, but the line is not repeated
        # within the minute.
        time.sleep(1.0)
        n = sum(1 for ln in d.logtext().splitlines() if "--join names failed" in ln)
        assert n == 1, "the line was repeated %d times" % n
        with redis.Redis(unix_socket_path=d.path, socket_timeout=5) as r:
            assert r.ping()
    print("ok: unresolvable --join names are logged once: %s" % line.split("warn", 1)[-1].strip())


if __name__ == "__main__":
    main()
