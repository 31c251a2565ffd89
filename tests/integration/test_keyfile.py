#!/usr/bin/python3
"""The cluster key file is private: `sluicectl keygen -o FILE` creates it
with mode 0600 whatever the umask (and never overwrites one), and sluiced
refuses a key file that others (or another group) can read, saying why,
unless --allow-shared-key-file says it is meant."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sluicetest  # noqa: E402


def sluiced_with_key(tmp, keyfile, *extra):
    port = sluicetest.free_udp_ports(1)[0]
    return subprocess.run([sluicetest.SLUICED, "--socket", os.path.join(tmp, "s.sock"),
                           "--gossip-bind", "127.0.0.1:%d" % port,
                           "--cluster-key-file", keyfile, "--log-level", "info", *extra],
                          capture_output=True, text=True, timeout=20)


def main():
    tmp = tempfile.mkdtemp(prefix="sluice-key-")
    try:
        key = os.path.join(tmp, "cluster.key")
        old = os.umask(0o022)
        try:
            subprocess.run([sluicetest.SLUICECTL, "keygen", "-o", key], check=True)
        finally:
            os.umask(old)
        mode = os.stat(key).st_mode & 0o777
        assert mode == 0o600, oct(mode)
        line = open(key).read().split()
        assert line[0] == "1" and len(line[1]) == 64 and line[2] == "use", line
        again = subprocess.run([sluicetest.SLUICECTL, "keygen", "-o", key],
                               capture_output=True, text=True)
        assert again.returncode != 0 and "never overwrites" in again.stderr, again.stderr
        assert open(key).read().split()[1] == line[1], "keygen overwrote the key file"
        print("ok: keygen -o writes a 0600 file and never overwrites one")

        os.chmod(key, 0o644)
        p = sluiced_with_key(tmp, key)
        assert p.returncode != 0, p
        assert "readable by others" in p.stderr and "0644" in p.stderr, p.stderr
        print("ok: a world-readable key file is refused: %s" % p.stderr.strip().splitlines()[-1])

        # Allowed on purpose: it starts (SIGTERM it once its socket is up).
        d = sluicetest.Daemon("--gossip-bind", "127.0.0.1:%d" % sluicetest.free_udp_ports(1)[0],
                              "--cluster-key-file", key, "--allow-shared-key-file",
                              tmpdir=tmp)
        d.start()
        assert d.stop() == 0
        d.log.close()
        print("ok: --allow-shared-key-file accepts it")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
