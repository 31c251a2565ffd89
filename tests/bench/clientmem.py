#!/usr/bin/python3
"""Client-memory flood: many clients that never read their replies.

Each client sends CLIENT SETNAME <NAME_BYTES> and then pipelines
ECHO <ECHO_BYTES> for as long as the daemon reads, never reading a reply.
Prints the daemon's RSS before, its peak (VmHWM), the RSS once every client
is closed (after --settle seconds), how many clients the daemon disconnected,
and whether a well-behaved client kept getting answers.

    python3 tests/bench/clientmem.py [--sluiced build/bin/sluiced]
        [--clients 1500] [--name-bytes 60000] [--echo-bytes 60000]
        [--seconds 20] [--settle 3] [-- extra sluiced flags]
"""
import argparse
import errno
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import sluicetest  # noqa: E402
from sluicetest import Daemon, resp_command  # noqa: E402


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluiced", default=sluicetest.SLUICED)
    ap.add_argument("--clients", type=int, default=1500)
    ap.add_argument("--name-bytes", type=int, default=60000)
    ap.add_argument("--echo-bytes", type=int, default=60000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    sluicetest.SLUICED = a.sluiced
    setname = resp_command("CLIENT", "SETNAME", "n" * a.name_bytes)
    echo = resp_command("ECHO", "e" * a.echo_bytes)
    with Daemon(*a.extra) as d:
        pid = d.proc.pid
        time.sleep(0.3)
        before = status_kb(pid, "VmRSS")
        good = d.connect()
        socks = []
        for _ in range(a.clients):
            s = d.connect()
            s.setblocking(False)
            socks.append([s, memoryview(setname), 0])
        dropped = 0
        good_ok = good_fail = 0
        deadline = time.monotonic() + a.seconds
        while time.monotonic() < deadline:
            progress = False
            for ent in socks:
                s = ent[0]
                if s is None:
                    continue
                try:
                    while True:
                        if len(ent[1]) == 0:
                            ent[1] = memoryview(echo)
                        n = s.send(ent[1])
                        ent[1] = ent[1][n:]
                        ent[2] += n
                        progress = True
                except BlockingIOError:
                    pass
                except OSError as e:
                    if e.errno not in (errno.EPIPE, errno.ECONNRESET):
                        raise
                    s.close()
                    ent[0] = None
                    dropped += 1
            try:
                good.sendall(b"PING\r\n")
                if sluicetest.recv_exact(good, 7) == b"+PONG\r\n":
                    good_ok += 1
                else:
                    good_fail += 1
            except OSError:
                good_fail += 1
            if not progress:
                time.sleep(0.05)
        peak_live = status_kb(pid, "VmRSS")
        hwm = status_kb(pid, "VmHWM")
        for ent in socks:
            if ent[0] is not None:
                ent[0].close()
        good.close()
        time.sleep(a.settle)
        after = status_kb(pid, "VmRSS")
        print("clients %d, SETNAME %d B, ECHO %d B, flags %s" %
              (a.clients, a.name_bytes, a.echo_bytes, " ".join(a.extra) or "(defaults)"))
        print("RSS before %.1f MB, at end of flood %.1f MB, peak (VmHWM) %.1f MB, "
              "%.0fs after close %.1f MB" %
              (before / 1024, peak_live / 1024, hwm / 1024, a.settle, after / 1024))
        print("clients disconnected by the daemon: %d; well-behaved client: %d answers, "
              "%d failures" % (dropped, good_ok, good_fail))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
