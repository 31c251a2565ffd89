"""SL.LEASE / SL.RELEASE / SL.RENEW on a real sluiced (local keys): at most n
held, release by id, renew, expiry by TTL, leases ended when their
connection closes unless DETACH, waiters served in arrival order when a
slot frees (and not before), a waiter limited at its deadline, a policy
from the config file, the INFO fields and metrics, and the HTTP endpoint.
Waits are asserted only as lower bounds or as orders."""
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import Daemon, free_tcp_port, recv_until, resp_command, wait_until  # noqa: E402

import redis  # noqa: E402  (Debian python3-redis)


def client(d):
    return redis.Redis(unix_socket_path=d.path, socket_timeout=30)


def lease(r, key, n, *extra):
    return r.execute_command("SL.LEASE", key, "CONCURRENCY", str(n), *extra)


def info(r):
    return r.info("leases")


class TestLease(unittest.TestCase):
    def test_hold_limit_release(self):
        with Daemon() as d:
            r = client(d)
            got = [lease(r, "k", 3, "DETACH") for _ in range(3)]
            for i, g in enumerate(got):
                self.assertEqual(g[0], 0, g)           # granted
                self.assertEqual(g[1], 3)              # limit
                self.assertEqual(g[2], 2 - i)          # remaining
                self.assertEqual(g[3], -1)             # retry_after_ms
                self.assertGreater(g[4], 0)            # id
                self.assertEqual(g[5], 30000)          # ttl_ms (default)
            self.assertEqual(len({g[4] for g in got}), 3)
            full = lease(r, "k", 3)
            self.assertEqual(full[0], 1)
            self.assertEqual(full[4], 0)
            self.assertEqual(full[5], -1)
            self.assertGreater(full[3], 29000)          # until the first lease expires
            self.assertLessEqual(full[3], 30000)
            # QTY beyond the limit can never fit
            self.assertEqual(lease(r, "k", 3, "QTY", "4")[3], -1)
            # release by id: once; the wrong key frees nothing
            self.assertEqual(r.execute_command("SL.RELEASE", "other", got[0][4]), 0)
            self.assertEqual(r.execute_command("SL.RELEASE", "k", got[0][4]), 1)
            self.assertEqual(r.execute_command("SL.RELEASE", "k", got[0][4]), 0)
            g = lease(r, "k", 3, "QTY", "1")
            self.assertEqual(g[0], 0)
            self.assertEqual(g[2], 0)
            i = info(r)
            self.assertEqual(i["leases_held"], 3)
            self.assertEqual(i["lease_keys"], 1)
            self.assertEqual(i["leases_released"], 1)
            self.assertEqual(i["leases_refused"], 2)
            # errors are replies
            for bad in (["SL.LEASE", "k"], ["SL.LEASE", "k", "CONCURRENCY", "0"],
                        ["SL.LEASE", "k", "CONCURRENCY", "2", "TTL", "0"],
                        ["SL.LEASE", "k", "POLICY", "nope"],
                        ["SL.LEASE", "k", "CONCURRENCY", "2", "BOGUS"],
                        ["SL.RELEASE", "k", "x"], ["SL.RENEW", "k"]):
                with self.assertRaises(redis.ResponseError, msg=bad):
                    r.execute_command(*bad)

    def test_expiry_and_renew(self):
        with Daemon() as d:
            r = client(d)
            a = lease(r, "e", 1, "TTL", "300", "DETACH")
            self.assertEqual(a[5], 300)
            # renewed before it expires: it outlives its first TTL
            time.sleep(0.15)
            self.assertEqual(r.execute_command("SL.RENEW", "e", a[4], "TTL", "600"), 600)
            time.sleep(0.3)
            self.assertEqual(lease(r, "e", 1)[0], 1)  # still held
            # and then it expires on its own, counted as expired
            wait_until(lambda: lease(r, "e", 1, "DETACH")[0] == 0, timeout=10,
                       what="the renewed lease to expire")
            self.assertEqual(r.execute_command("SL.RENEW", "e", a[4]), -2)
            self.assertEqual(r.execute_command("SL.RELEASE", "e", a[4]), 0)
            self.assertGreaterEqual(info(r)["leases_expired"], 1)

    def test_disconnect_releases_unless_detached(self):
        with Daemon() as d:
            r = client(d)
            c1 = client(d)
            self.assertEqual(lease(c1, "dc", 2)[0], 0)
            det = lease(c1, "dc", 2, "DETACH")
            self.assertEqual(det[0], 0)
            self.assertEqual(lease(r, "dc", 2)[0], 1)
            c1.connection_pool.disconnect()
            # the attached lease went with its connection, the detached one stays
            wait_until(lambda: info(r)["leases_held"] == 1, what="the attached lease to end")
            self.assertEqual(info(r)["leases_released_by_disconnect"], 1)
            self.assertEqual(lease(r, "dc", 2, "DETACH")[0], 0)
            self.assertEqual(lease(r, "dc", 2)[0], 1)
            self.assertEqual(r.execute_command("SL.RELEASE", "dc", det[4]), 1)

    def test_waiters_in_order(self):
        with Daemon() as d:
            r = client(d)
            held = lease(r, "w", 1, "DETACH")
            self.assertEqual(held[0], 0)
            order, lock = [], threading.Lock()
            clients = [client(d) for _ in range(4)]

            def wait_lease(i):
                rep = lease(clients[i], "w", 1, "TIMEOUT", "20000")
                with lock:
                    order.append((i, rep))

            threads = []
            for i in range(4):
                t = threading.Thread(target=wait_lease, args=(i,))
                t.start()
                threads.append(t)
                wait_until(lambda: info(r)["leases_waiting"] == i + 1,
                           what="waiter %d to queue" % i)
            # nobody is served while the slot is held
            time.sleep(0.2)
            self.assertEqual(order, [])
            # each release wakes exactly the next waiter in arrival order
            cur = held
            for i in range(4):
                self.assertEqual(r.execute_command("SL.RELEASE", "w", cur[4]), 1)
                wait_until(lambda: len(order) == i + 1, what="waiter %d to be served" % i)
                time.sleep(0.05)
                self.assertEqual(len(order), i + 1)  # one at a time, no herd
                who, rep = order[i]
                self.assertEqual(who, i)
                self.assertEqual(rep[0], 0, rep)
                self.assertGreater(rep[6], 0)        # waited_ms
                cur = rep
            for t in threads:
                t.join()
            self.assertEqual(info(r)["leases_waiting"], 0)
            # a waiter is freed by an expiry too, and one whose deadline passes
            # first is answered limited at its deadline
            lease(r, "x", 1, "TTL", "400", "DETACH")
            t0 = time.monotonic()
            rep = lease(clients[0], "x", 1, "TIMEOUT", "100")
            self.assertEqual(rep[0], 1)
            self.assertGreaterEqual(time.monotonic() - t0, 0.09)
            rep = lease(clients[0], "x", 1, "TIMEOUT", "10000", "DETACH")
            self.assertEqual(rep[0], 0, rep)
            self.assertGreaterEqual(rep[6], 150)
            # a waiter whose client leaves costs nothing
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.path)
            s.sendall(b"*6\r\n$8\r\nSL.LEASE\r\n$1\r\nx\r\n$11\r\nCONCURRENCY\r\n$1\r\n1\r\n"
                      b"$7\r\nTIMEOUT\r\n$5\r\n10000\r\n")
            wait_until(lambda: info(r)["leases_waiting"] == 1, what="the raw waiter")
            s.close()
            wait_until(lambda: info(r)["leases_waiting"] == 0, what="the waiter to go")

    def test_policy_http_metrics(self):
        port = free_tcp_port()
        tmp = tempfile.mkdtemp(prefix="sluice-it-")
        conf = os.path.join(tmp, "sluice.conf")
        with open(conf, "w") as f:
            f.write("[sluiced]\nhttp = 127.0.0.1:%d\n\n"
                    "[policy exports]\nalgorithm = concurrency\nlimit = 2\nttl = 5s\n"
                    "match = export:\n" % port)
        self.addCleanup(shutil.rmtree, tmp, True)
        with Daemon("--config", conf) as d:
            r = client(d)
            a = r.execute_command("SL.LEASE", "export:t1")     # by match prefix
            self.assertEqual(a[:2], [0, 2])
            self.assertEqual(a[5], 5000)
            b = r.execute_command("SL.LEASE", "export:t1", "POLICY", "exports", "DETACH")
            self.assertEqual(b[0], 0)
            self.assertEqual(r.execute_command("SL.LEASE", "export:t1")[0], 1)
            s = d.connect()
            s.sendall(resp_command("HELLO", "3"))
            recv_until(s, b"modules\r\n*0\r\n")
            s.sendall(resp_command("SL.LEASE", "export:t2", "POLICY", "exports"))
            m = recv_until(s, b"$6\r\npolicy\r\n$7\r\nexports\r\n")
            self.assertTrue(m.startswith(b"%8\r\n$7\r\nlimited\r\n:0\r\n"), m)
            self.assertIn(b"$2\r\nid\r\n:", m)
            s.close()
            # a throttle never finds a concurrency policy
            with self.assertRaises(redis.ResponseError):
                r.execute_command("SL.THROTTLE", "x", "POLICY", "exports")
            # HTTP: POST takes a detached lease, DELETE releases it
            base = "http://127.0.0.1:%d" % port
            req = urllib.request.Request(base + "/v1/lease?key=export:h&policy=exports",
                                         method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                self.assertEqual(resp.status, 200)
                body = resp.read().decode()
                lid = int(resp.headers["X-Lease-Id"])
                self.assertIn('"id":%d' % lid, body)
            req = urllib.request.Request(base + "/v1/lease?key=export:h&policy=exports",
                                         method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                self.assertEqual(resp.status, 200)
                lid2 = int(resp.headers["X-Lease-Id"])
            req = urllib.request.Request(base + "/v1/lease?key=export:h&policy=exports",
                                         method="POST")
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req, timeout=10)
            self.assertEqual(cm.exception.code, 429)
            self.assertIsNotNone(cm.exception.headers["Retry-After"])
            req = urllib.request.Request(base + "/v1/lease/%d?key=export:h" % lid,
                                         method="DELETE")
            with urllib.request.urlopen(req, timeout=10) as resp:
                self.assertEqual(resp.status, 200)
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req, timeout=10)
            self.assertEqual(cm.exception.code, 404)
            self.assertEqual(r.execute_command("SL.RELEASE", "export:h", lid2), 1)
            # a request that cannot wait, behind one that waits, is refused at
            # once (the waiter came first), over HTTP (no connection to
            # answer later) and over RESP without TIMEOUT; the waiter is
            # then served by the release
            held = lease(r, "export:q", 1, "DETACH")
            waiter = client(d)
            got = []
            t = threading.Thread(target=lambda: got.append(
                lease(waiter, "export:q", 1, "TIMEOUT", "20000", "DETACH")))
            t.start()
            wait_until(lambda: info(r)["leases_waiting"] == 1, what="the waiter to queue")
            r.execute_command("SL.RELEASE", "export:q", held[4])
            t.join()
            self.assertEqual(got[0][0], 0, got)
            held = got[0]
            t = threading.Thread(target=lambda: got.append(
                lease(waiter, "export:q", 1, "TIMEOUT", "20000", "DETACH")))
            t.start()
            wait_until(lambda: info(r)["leases_waiting"] == 1, what="the waiter to queue")
            req = urllib.request.Request(base + "/v1/lease?key=export:q&limit=1",
                                         method="POST")
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req, timeout=10)
            self.assertEqual(cm.exception.code, 429)
            rep = lease(r, "export:q", 1)
            self.assertEqual(rep[0], 1, rep)
            self.assertGreaterEqual(rep[3], 1)   # retry_after_ms: the held lease's TTL
            self.assertEqual(info(r)["leases_waiting"], 1)
            r.execute_command("SL.RELEASE", "export:q", held[4])
            t.join()
            self.assertEqual(got[1][0], 0, got)
            self.assertEqual(r.execute_command("SL.RELEASE", "export:q", got[1][4]), 1)
            with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
                text = resp.read().decode()
            for name in ("sluice_leases_held", "sluice_leases_waiting",
                         "sluice_leases_expired_total", "sluice_leases_released_total",
                         "sluice_leases_released_by_disconnect_total",
                         "sluice_leases_granted_total", "sluice_leases_refused_total"):
                self.assertIn("\n" + name + " ", text, name)


if __name__ == "__main__":
    unittest.main()
