#!/usr/bin/python3
"""Redis transactions, so every client's default pipeline works: MULTI,
queued commands answered +QUEUED, EXEC running them as one and answering
their replies; DISCARD; EXEC or DISCARD without MULTI and nested MULTI
refused as Redis refuses them; a command refused while queuing aborts the
transaction (EXECABORT); WATCH/UNWATCH answer OK and never abort; a waiting
SL.ACQUIRE is refused inside MULTI.  redis-py's pipeline() (a MULTI/EXEC
transaction by default) is the client."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402

import redis  # noqa: E402


def main():
    with sluicetest.Daemon() as d:
        r = redis.Redis(unix_socket_path=d.path, socket_timeout=10)
        # redis-py's default pipeline is a transaction
        with r.pipeline() as p:
            for _ in range(3):
                p.execute_command("CL.THROTTLE", "tx:a", 1, 1, 3600)
            p.execute_command("SL.PEEK", "tx:b", "ALGO", "gcra", "RATE", "10", "60000")
            out = p.execute()
        assert [x[0] for x in out[:3]] == [0, 0, 1], out
        assert out[3][2] == 1, out  # peek: limit 1, nothing taken
        print("ok: redis-py pipeline() (MULTI/EXEC):", out)
        # WATCH never aborts: the transaction runs
        with r.pipeline() as p:
            p.watch("tx:a")
            p.multi()
            p.execute_command("CL.THROTTLE", "tx:c", 5, 10, 60)
            assert p.execute()[0][0] == 0
        # raw protocol: errors as Redis words them
        s = d.connect()
        try:
            def cmd(*a):
                s.sendall(sluicetest.resp_command(*a))
                return sluicetest.recv_until(s, b"\r\n")
            assert cmd("EXEC").startswith(b"-ERR EXEC without MULTI")
            assert cmd("DISCARD").startswith(b"-ERR DISCARD without MULTI")
            assert cmd("MULTI") == b"+OK\r\n"
            assert cmd("MULTI").startswith(b"-ERR MULTI calls can not be nested")
            assert cmd("CL.THROTTLE", "tx:d", 5, 10, 60) == b"+QUEUED\r\n"
            assert cmd("DISCARD") == b"+OK\r\n"
            assert cmd("SL.PEEK", "tx:d", "ALGO", "gcra", "RATE", "10", "60000")[:4] == b"*5\r\n"
            assert cmd("MULTI") == b"+OK\r\n"
            assert cmd("NOPE").startswith(b"-ERR unknown command")
            assert cmd("CL.THROTTLE", "tx:e", 5, 10, 60) == b"+QUEUED\r\n"
            assert cmd("EXEC").startswith(b"-EXECABORT")
            assert cmd("MULTI") == b"+OK\r\n"
            assert cmd("SL.ACQUIRE", "tx:f", "ALGO", "gcra", "RATE", "1", "1000", "TIMEOUT",
                       "10").startswith(b"-ERR SL.ACQUIRE cannot wait inside MULTI")
            assert cmd("EXEC").startswith(b"-EXECABORT")
            # the discarded and aborted transactions charged nothing
            peek = cmd("SL.PEEK", "tx:d", "ALGO", "gcra", "RATE", "10", "60000").split(b"\r\n")
            assert peek[0] == b"*5" and peek[2] == peek[3], peek  # remaining == limit
        finally:
            s.close()
        print("ok: EXEC/DISCARD without MULTI, nested MULTI, EXECABORT, SL.ACQUIRE refused")
    print("PASS")


if __name__ == "__main__":
    main()
