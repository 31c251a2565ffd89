"""The Prometheus endpoint of a real sluiced: counters move by what clients
did, the text parses as the exposition format line by line, bad requests get
their error and the daemon keeps answering, and the flag, the config file
and the cluster families behave as documented."""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import (SLUICED, Daemon, free_tcp_port, free_udp_ports, recv_all,  # noqa: E402
                        resp_command, wait_until)

import redis  # noqa: E402  (Debian python3-redis)

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABELS = r'\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\}'
SAMPLE = re.compile(r"^(%s)(%s)? (-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?|NaN|[+-]Inf)$"
                    % (NAME, LABELS))
HELP = re.compile(r"^# HELP (%s) .*$" % NAME)
TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % NAME)


def parse_exposition(text):
    """Checks the text line by line (version 0.0.4) and returns
    {series: value}, series being the name plus its label text."""
    assert text.endswith("\n"), "the text must end with a newline"
    typed, helped, out = {}, set(), {}
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        m = HELP.match(line)
        if m:
            assert m.group(1) not in helped, "line %d: second HELP for %s" % (n, m.group(1))
            helped.add(m.group(1))
            continue
        m = TYPE.match(line)
        if m:
            assert m.group(1) not in typed, "line %d: second TYPE for %s" % (n, m.group(1))
            typed[m.group(1)] = m.group(2)
            current = m.group(1)
            continue
        m = SAMPLE.match(line)
        assert m, "line %d does not parse: %r" % (n, line)
        name = m.group(1)
        if typed.get(current) == "histogram":
            # NAME_bucket{le="..."}, NAME_sum, NAME_count
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert base == current, "line %d: sample %s outside its family %s" % (n, name, current)
            series = name + (m.group(2) or "")
            out[series] = float(m.group(3))
            continue
        assert name == current, "line %d: sample %s outside its family %s" % (n, name, current)
        if typed[name] == "counter":
            assert name.endswith("_total"), name
        series = name + (m.group(2) or "")
        assert series not in out, "line %d: duplicate series %s" % (n, series)
        out[series] = float(m.group(3))
    assert helped == set(typed), "families without HELP or TYPE"
    return out


def scrape(port, path="/metrics"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        assert r.status == 200
        return r.headers, r.read().decode()


def raw(port, data):
    """Sends bytes, returns everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        return recv_all(s)


class MetricsTest(unittest.TestCase):
    def daemon(self, *extra):
        self.port = free_tcp_port()
        return Daemon("--metrics", "127.0.0.1:%d" % self.port, *extra)

    def test_counters_follow_throttles(self):
        with self.daemon() as d:
            headers, text = scrape(self.port)
            self.assertEqual(headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
            before = parse_exposition(text)
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            # burst 2: three allowed at once, then two refused.
            answers = [r.execute_command("CL.THROTTLE", "m:1", 2, 1, 60, 1)[0]
                       for _ in range(5)]
            self.assertEqual(answers, [0, 0, 0, 1, 1])
            after = parse_exposition(scrape(self.port)[1])
            self.assertEqual(after["sluice_decisions_total"] - before["sluice_decisions_total"], 5)
            self.assertEqual(after["sluice_limited_total"] - before["sluice_limited_total"], 2)
            self.assertEqual(after["sluice_keys"], 1)
            self.assertEqual(after["sluice_connected_clients"], 1)
            self.assertGreaterEqual(after["sluice_commands_total"], 5)
            self.assertNotIn("sluice_synced", after)  # not clustered
            r.close()
            _, body = scrape(self.port, "/health")
            self.assertEqual(body, "ok\n")

    def test_loop_turns(self):
        """The event loop's turns are measured: INFO's loop_turns and
        loop_max_turn_us, the histogram on /metrics counting the same turns,
        and CONFIG RESETSTAT forgetting the longest turn."""
        with self.daemon() as d:
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            for i in range(50):
                r.execute_command("CL.THROTTLE", "turns:%d" % i, 5, 10, 1)
            info = r.info("stats")
            self.assertGreater(info["loop_turns"], 0)
            self.assertGreaterEqual(info["loop_max_turn_us"], 0)
            fams = parse_exposition(scrape(self.port)[1])
            self.assertGreaterEqual(fams["sluice_loop_turn_seconds_count"], info["loop_turns"])
            self.assertEqual(r.execute_command("CONFIG", "RESETSTAT"), b"OK")
            after = r.info("stats")
            self.assertGreater(after["loop_turns"], info["loop_turns"])
            r.close()

    def test_bad_requests_and_keeps_answering(self):
        with self.daemon() as d:
            out = raw(self.port, b"\x00\x01garbage that is not http\r\n\r\n")
            self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out[:40])
            out = raw(self.port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
            self.assertTrue(out.startswith(b"HTTP/1.1 431 "), out[:40])
            out = raw(self.port, b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
            self.assertTrue(out.startswith(b"HTTP/1.1 405 "), out[:40])
            with self.assertRaises(urllib.error.HTTPError) as cm:
                scrape(self.port, "/nothing")
            self.assertEqual(cm.exception.code, 404)
            # A client that connects and says nothing does not block others.
            idle = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            parse_exposition(scrape(self.port)[1])
            idle.close()
            # The RESP side is untouched.
            r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
            self.assertEqual(r.ping(), True)
            r.close()

    def test_keep_alive_pipelined(self):
        with self.daemon():
            req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3
            req += b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
            out = raw(self.port, req)
            self.assertEqual(out.count(b"HTTP/1.1 200 OK\r\n"), 4)
            self.assertEqual(out.count(b"Connection: keep-alive\r\n"), 3)
            self.assertTrue(out.endswith(b"Connection: close\r\n\r\nok\n"))

    def test_slow_reader_and_shutdown(self):
        """A client that pipelines scrapes and never reads fills its socket:
        the daemon keeps serving others, and SIGTERM still exits cleanly
        (the Daemon context checks status 0, i.e. no sanitizer report)."""
        with self.daemon():
            hog = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            hog.setblocking(False)
            req = b"GET /metrics HTTP/1.1\r\n\r\n" * 100
            sent, blocked = 0, 0
            # Until the daemon stops reading it (its answers are stuck), or
            # 10000 requests: tens of MB of answers, more than the socket
            # buffers hold.
            while sent < 100 * len(req) and blocked < 50:
                try:
                    sent += hog.send(req)
                    blocked = 0
                except BlockingIOError:
                    blocked += 1
                    time.sleep(0.01)
            half = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            half.sendall(b"GET /metr")
            parse_exposition(scrape(self.port)[1])
        hog.close()
        half.close()

    def test_config_file_and_off(self):
        port = free_tcp_port()
        with tempfile.TemporaryDirectory() as tmp:
            conf = os.path.join(tmp, "sluice.conf")
            with open(conf, "w") as f:
                f.write("[sluiced]\nmetrics = 127.0.0.1:%d\n" % port)
            with Daemon("--config", conf):
                self.assertIn("sluice_policies 0\n", scrape(port)[1])
            # --metrics off overrides the file: nothing listens.
            with Daemon("--config", conf, "--metrics", "off"):
                with self.assertRaises(OSError):
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()

    def wait_metric(self, series, want, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            m = parse_exposition(scrape(self.port)[1])
            if m.get(series) == want or time.monotonic() > deadline:
                self.assertEqual(m.get(series), want, series)
                return m
            time.sleep(0.05)

    def test_policies_reloads_and_waiters(self):
        with tempfile.TemporaryDirectory() as tmp:
            conf = os.path.join(tmp, "sluice.conf")
            with open(conf, "w") as f:
                f.write("[policy api]\nburst = 5\nrate = 10 per 1s\n"
                        "[policy web]\nrate = 1 per 1s\n")
            with self.daemon("--config", conf) as d:
                m = parse_exposition(scrape(self.port)[1])
                self.assertEqual(m["sluice_policies"], 2)
                self.assertEqual(m["sluice_reloads_total"], 0)
                d.proc.send_signal(signal.SIGHUP)
                self.wait_metric("sluice_reloads_total", 1)
                with open(conf, "w") as f:
                    f.write("[policy api]\nrate = this is not a limit\n")
                d.proc.send_signal(signal.SIGHUP)
                m = self.wait_metric("sluice_reload_failures_total", 1)
                self.assertEqual(m["sluice_policies"], 2)  # the running set is kept
                # One acquire takes the only unit, the next one waits.
                with d.connect() as s:
                    cmd = resp_command("SL.ACQUIRE", "w", "ALGO", "gcra", "BURST", 0, "RATE", 1,
                                       20000, "TIMEOUT", 30000)
                    s.sendall(cmd + cmd)
                    self.wait_metric("sluice_waiting_acquires", 1)
                self.wait_metric("sluice_waiting_acquires", 0)

    def test_bad_address_refuses_to_start(self):
        busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        with tempfile.TemporaryDirectory() as tmp:
            for addr, why in (("127.0.0.1:%d" % busy.getsockname()[1], "cannot listen"),
                              ("127.0.0.1:notaport", "not HOST:PORT")):
                p = subprocess.run([SLUICED, "--socket", os.path.join(tmp, "s.sock"),
                                    "--metrics", addr], capture_output=True, text=True,
                                   timeout=30)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(why, p.stdout + p.stderr)
                self.assertFalse(os.path.exists(os.path.join(tmp, "s.sock")))
        busy.close()

    def test_cluster_families(self):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        gport = udp.getsockname()[1]
        udp.close()
        with self.daemon("--gossip-bind", "127.0.0.1:%d" % gport, "--insecure-no-encryption",
                         "--node-name", "solo"):
            deadline = time.monotonic() + 10
            while True:
                m = parse_exposition(scrape(self.port)[1])
                if m.get("sluice_synced") == 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual(m['sluice_cluster_members{state="alive"}'], 1)
            self.assertEqual(m['sluice_cluster_members{state="dead"}'], 0)
            self.assertIn('sluice_gossip_drops_total{reason="auth"}', m)
            self.assertIn("sluice_gossip_packets_sent_total", m)
            self.assertIn("sluice_reports_sent_total", m)
            self.assertEqual(m["sluice_global_keys"], 0)
            self.assertEqual(m["sluice_synced"], 1)


INFO_OF = re.compile(r"^# HELP (%s) .*\(INFO ([a-z0-9_]+)\)$" % NAME, re.M)


# INFO's numeric fields that count nothing (who and since when this process
# is), so have no family in /metrics.
INFO_ONLY = {"process_id", "uptime_in_seconds", "cluster_enabled", "incarnation"}


class InfoAgreesTest(unittest.TestCase):
    """Every counter /metrics shows is an INFO field with the same value and
    every counter INFO shows is a family (or a labelled series), on two
    clustered nodes that replicate a global key (reports and leases move,
    so a count of messages and a count of entries differ)."""

    def test_every_counter_agrees(self):
        ports = free_udp_ports(2)
        join = ",".join("127.0.0.1:%d" % p for p in ports)
        http = [free_tcp_port(), free_tcp_port()]
        nodes = [Daemon("--metrics", "127.0.0.1:%d" % http[i], "--node-name", "m%d" % i,
                        "--gossip-bind", "127.0.0.1:%d" % ports[i], "--join", join,
                        "--insecure-no-encryption", "--gossip-probe-interval-ms", "200")
                 for i in range(2)]
        try:
            for d in nodes:
                d.start()
            rs = [redis.Redis(unix_socket_path=d.path, socket_timeout=10) for d in nodes]
            wait_until(lambda: all(int(r.info("cluster").get("members_alive", 0)) == 2 and
                                   r.info("cluster").get("synced") == "yes" and
                                   r.info("cluster").get("cluster_state") == "ok" for r in rs),
                       20, "two synced, ready members", interval=0.1)
            for i in range(40):
                for r in rs:
                    r.execute_command("SL.THROTTLE", "agree:%d" % (i % 8), "ALGO", "gcra", "BURST",
                                      10, "RATE", 1000, 1000)
            wait_until(lambda: all(int(r.info("cluster")["report_entries_sent"]) >
                                   int(r.info("cluster")["reports_sent"]) > 0 for r in rs),
                       20, "reports of several keys each", interval=0.1)
            for i, r in enumerate(rs):
                before = r.info("everything")
                text = scrape(http[i])[1]
                after = r.info("everything")
                m = parse_exposition(text)
                pairs = INFO_OF.findall(text)
                self.assertGreater(len(pairs), 60)
                for family, field in pairs:
                    if field.endswith("_REASON"):
                        continue  # labelled: one INFO line per label, checked below
                    self.assertIn(field, before, family)
                    if field == "client_memory":
                        continue  # the buffers of the very INFO and scrape that read it
                    lo, hi = sorted((int(before[field]), int(after[field])))
                    v = m[family] - (1 if field == "http_connections" else 0)  # the scrape's
                    self.assertTrue(lo <= v <= hi, "%s=%d, INFO %s %d..%d"
                                    % (family, m[family], field, lo, hi))
                for series, v in m.items():
                    if series.startswith("sluice_gossip_drops_total{"):
                        reason = series.split('"')[1]
                        self.assertLessEqual(int(before["gossip_drops_" + reason]), v)
                        self.assertLessEqual(v, int(after["gossip_drops_" + reason]))
                # ...and every counter INFO shows is a family: a table
                # rendered in INFO alone (or a hand-written INFO line) fails.
                paired = {field for _, field in pairs}
                for field, value in before.items():
                    if not isinstance(value, int) or field in INFO_ONLY:
                        continue
                    if field.startswith("members_"):  # labelled, by state
                        series = 'sluice_cluster_members{state="%s"}' % field[len("members_"):]
                    elif field.startswith("gossip_drops_"):  # labelled, by reason
                        series = ('sluice_gossip_drops_total{reason="%s"}'
                                  % field[len("gossip_drops_"):])
                    else:
                        if field not in paired:
                            self.fail("INFO %s has no /metrics family" % field)
                        continue
                    self.assertIn(series, m, "INFO %s" % field)
                    lo, hi = sorted((int(before[field]), int(after[field])))
                    self.assertTrue(lo <= m[series] <= hi, "%s=%d, INFO %s %d..%d"
                                    % (series, m[series], field, lo, hi))
                # The two readiness flags: strings in INFO, 0/1 gauges here
                # (as INFO said before or after the scrape: a flag may flip
                # between the reads on a slow host).
                self.assertIn(m["sluice_synced"], {1 if x["synced"] == "yes" else 0
                                                   for x in (before, after)})
                self.assertIn(m["sluice_ready"], {1 if x["cluster_state"] == "ok" else 0
                                                  for x in (before, after)})
                # The fixed disagreement: messages in one, entries in the other.
                self.assertLess(m["sluice_reports_sent_total"],
                                m["sluice_report_entries_sent_total"])
            for r in rs:
                r.close()
        finally:
            for d in nodes:
                d.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
