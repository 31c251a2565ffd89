#!/usr/bin/python3
"""One client cannot grow the daemon through a transaction: MULTI, many
SCAN COUNT 10000, EXEC used to build the whole reply inside EXEC before the
output bound was looked at (17.9 GB RSS, or an OOM kill in a 512 MiB limit).

Now (1) MULTI refuses to queue a command once the transaction's worst-case
reply could pass the per-client output limit (16 MiB), so EXEC answers
EXECABORT and runs nothing; (2) EXEC checks the reply against the output
limit and the clients' memory budget after every queued command, and a
reply that no longer fits is dropped and the client closed with an error,
while the daemon's peak memory stays near the budget and other clients are
answered."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402

KEYS = 2000
KEYLEN = 400


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def sanitized(pid):
    """ASan keeps freed memory in quarantine, so RSS says nothing there."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def fill(d):
    s = d.connect()
    try:
        batch = b"".join(sluicetest.resp_command("CL.THROTTLE", ("k%05d" % i).ljust(KEYLEN, "x"),
                                                 5, 10, 3600) for i in range(KEYS))
        s.sendall(batch)
        got = 0
        data = b""
        while got < KEYS:
            chunk = s.recv(1 << 16)
            assert chunk, "daemon closed while filling"
            data += chunk
            got = data.count(b"*5\r\n")
    finally:
        s.close()


def cmd(s, *a):
    s.sendall(sluicetest.resp_command(*a))
    return sluicetest.recv_until(s, b"\r\n")


def main():
    # (1) the worst case is bounded when queuing
    with sluicetest.Daemon() as d:
        s = d.connect()
        try:
            assert cmd(s, "MULTI") == b"+OK\r\n"
            answers = [cmd(s, "SCAN", "0", "COUNT", "10000") for _ in range(4)]
            # 10000 keys of up to 512 bytes: 5.3 MB each, three fit 16 MiB
            assert answers[:3] == [b"+QUEUED\r\n"] * 3, answers
            assert answers[3].startswith(b"-ERR the transaction's reply could pass"), answers
            assert cmd(s, "EXEC").startswith(b"-EXECABORT"), "EXEC ran a refused transaction"
            assert cmd(s, "PING") == b"+PONG\r\n"
        finally:
            s.close()
        print("ok: MULTI refuses a 4th SCAN COUNT 10000 (worst case past 16 MiB), EXECABORT")

    # (2) the reply is checked as it is built, against the clients' budget
    budget = 4 << 20
    with sluicetest.Daemon("--max-client-memory", str(budget)) as d:
        fill(d)
        base = peak_rss_kib(d.proc.pid)
        s = d.connect(timeout=30)
        other = d.connect()
        try:
            assert cmd(s, "MULTI") == b"+OK\r\n"
            # worst case 2500 * 528 B each: 12 fit the output limit, but
            # each answers all 2000 keys (830 KB), 10 MB past the 4 MiB budget
            for _ in range(12):
                assert cmd(s, "SCAN", "0", "COUNT", "2500") == b"+QUEUED\r\n"
            s.sendall(sluicetest.resp_command("EXEC"))
            reply = sluicetest.recv_all(s)
            assert reply.startswith(b"-ERR EXEC reply passed the client output limit"), \
                reply[:80]
            assert len(reply) < 200, "the reply was sent before the client was closed"
            grown = peak_rss_kib(d.proc.pid) - base
            if not sanitized(d.proc.pid):
                assert grown < 8 << 10, "peak RSS grew %d KiB for a %d byte budget" % (grown,
                                                                                      budget)
            assert cmd(other, "PING") == b"+PONG\r\n"
            assert "reply of" in d.logtext() and "disconnecting" in d.logtext()
        finally:
            s.close()
            other.close()
        print("ok: EXEC past the 4 MiB budget: client closed with an error, peak RSS grew %d KiB, "
              "others answered" % grown)
    print("PASS")


if __name__ == "__main__":
    main()
