"""The socket cannot be squatted: sluiced refuses a socket directory others
may write to unless it is sticky, and in a sticky one a socket another user
bound first; by default it listens in a directory only its user can create
in ($XDG_RUNTIME_DIR/sluice, or /tmp/sluice-UID, made 0700), refuses such a
directory made by someone else, and sluicectl refuses a default socket that
belongs to another user.  Runs as root (CI): other users' files are made
with chown to nobody (65534)."""
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import SLUICECTL, SLUICED  # noqa: E402

NOBODY = 65534


def run_daemon(args, env, timeout=5):
    """Starts sluiced; returns (proc, None) once it listens, or (None, output)
    when it exits first."""
    p = subprocess.Popen([SLUICED] + args, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            return None, p.communicate()[0]
        named = ["-s", args[1]] if args[:1] == ["--socket"] else []
        if subprocess.run([SLUICECTL] + named + ["ping"], env=env,
                          capture_output=True).returncode == 0:
            return p, None
        time.sleep(0.05)
    p.kill()
    raise AssertionError("sluiced neither listened nor exited: " + p.communicate()[0])


def stop(p):
    p.terminate()
    p.wait(timeout=20)


class SocketDir(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-sockdir-")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("SLUICE_SOCKET", "XDG_RUNTIME_DIR")}

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_world_writable_directory_refused(self):
        d = os.path.join(self.tmp, "open")
        os.mkdir(d)
        os.chmod(d, 0o777)
        p, out = run_daemon(["--socket", os.path.join(d, "s.sock")], self.env)
        self.assertIsNone(p)
        self.assertIn("writable by others", out)

    def test_sticky_directory_with_a_squatter(self):
        d = os.path.join(self.tmp, "shared")
        os.mkdir(d)
        os.chmod(d, 0o1777)
        path = os.path.join(d, "s.sock")
        squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        squat.bind(path)
        squat.listen(1)
        squat.close()  # a stale socket file, but another user's
        os.chown(path, NOBODY, NOBODY)
        p, out = run_daemon(["--socket", path], self.env)
        self.assertIsNone(p)
        self.assertIn("belongs to uid %d" % NOBODY, out)
        # Our own stale socket in the same sticky directory is replaced.
        os.chown(path, os.geteuid(), os.getegid())
        p, out = run_daemon(["--socket", path], self.env)
        self.assertIsNotNone(p, out)
        stop(p)

    @unittest.skipIf(os.path.isdir("/run/sluice"), "/run/sluice exists: it is the default")
    def test_default_is_private_and_checked(self):
        env = dict(self.env, XDG_RUNTIME_DIR=self.tmp)
        want = os.path.join(self.tmp, "sluice", "sluice.sock")
        got = subprocess.run([SLUICECTL, "path"], env=env, capture_output=True, text=True)
        self.assertEqual(got.stdout.strip(), want)
        p, out = run_daemon([], env)
        self.assertIsNotNone(p, out)
        try:
            st = os.stat(os.path.dirname(want))
            self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
            self.assertEqual(subprocess.run([SLUICECTL, "ping"], env=env,
                                            capture_output=True, text=True).stdout, "PONG\n")
            # A default socket that is not ours (nor root's, nor its
            # directory owner's) is not trusted by default...
            os.chown(os.path.dirname(want), NOBODY, NOBODY)
            os.chown(want, 1234, 1234)
            r = subprocess.run([SLUICECTL, "ping"], env=env, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("refusing", r.stderr)
            # ...but can be named explicitly.
            r = subprocess.run([SLUICECTL, "-s", want, "ping"], env=env, capture_output=True,
                               text=True)
            self.assertEqual(r.stdout, "PONG\n", r.stderr)
            os.chown(want, 0, 0)
            os.chown(os.path.dirname(want), 0, 0)
        finally:
            stop(p)
        # The default directory made first by another user is refused.
        os.chown(os.path.dirname(want), NOBODY, NOBODY)
        p, out = run_daemon([], env)
        self.assertIsNone(p)
        self.assertIn("not a private directory", out)

    @unittest.skipIf(os.path.isdir("/run/sluice"), "/run/sluice exists: it is the default")
    def test_impostor_directory_refused(self):
        """Another user makes our default directory first (0755, theirs) and
        binds a socket in it: the default connection refuses it (it used to
        trust a socket whose owner owned the directory)."""
        env = dict(self.env, XDG_RUNTIME_DIR=self.tmp)
        d = os.path.join(self.tmp, "sluice")
        os.mkdir(d, 0o755)
        path = os.path.join(d, "sluice.sock")
        os.chown(d, NOBODY, NOBODY)
        p, out = run_daemon(["--socket", path], env)
        self.assertIsNotNone(p, out)
        try:
            os.chown(path, NOBODY, NOBODY)  # the impostor's socket
            r = subprocess.run([SLUICECTL, "ping"], env=env, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("refusing", r.stderr)
            self.assertNotIn("PONG", r.stdout)
            # A private directory of ours is trusted.
            os.chown(d, os.geteuid(), os.getegid())
            os.chmod(d, 0o700)
            r = subprocess.run([SLUICECTL, "ping"], env=env, capture_output=True, text=True)
            self.assertEqual(r.stdout, "PONG\n", r.stderr)
        finally:
            stop(p)

    @unittest.skipIf(os.path.isdir("/run/sluice"), "/run/sluice exists: it is the default")
    @unittest.skipIf(os.geteuid() != 0 or shutil.which("setpriv") is None,
                     "needs root and setpriv to run a daemon as another user")
    def test_peer_of_another_user_refused(self):
        """The socket file looks right (ours, in our 0700 directory) but the
        process answering runs as another user: SO_PEERCRED refuses it."""
        base = tempfile.mkdtemp(prefix="sluice-peer-")
        try:
            os.chmod(base, 0o755)
            other = os.path.join(base, "other")
            os.mkdir(other, 0o700)
            os.chown(other, NOBODY, NOBODY)
            p = subprocess.Popen(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                                  "--clear-groups", SLUICED, "--socket",
                                  os.path.join(other, "s.sock")],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 10
                while not os.path.exists(os.path.join(other, "s.sock")):
                    self.assertIsNone(p.poll(), "the impostor daemon exited")
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.05)
                env = dict(self.env, XDG_RUNTIME_DIR=self.tmp)
                d = os.path.join(self.tmp, "sluice")
                os.mkdir(d, 0o700)
                path = os.path.join(d, "sluice.sock")
                os.rename(os.path.join(other, "s.sock"), path)
                os.chown(path, os.geteuid(), os.getegid())
                r = subprocess.run([SLUICECTL, "ping"], env=env, capture_output=True, text=True)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("refusing", r.stderr)
                self.assertNotIn("PONG", r.stdout)
            finally:
                p.terminate()
                p.wait(timeout=20)
        finally:
            shutil.rmtree(base, ignore_errors=True)

    @unittest.skipIf(os.path.isdir("/run/sluice"), "/run/sluice exists: it is the default")
    def test_without_xdg_a_per_user_tmp_directory(self):
        want = "/tmp/sluice-%d/sluice.sock" % os.geteuid()
        got = subprocess.run([SLUICECTL, "path"], env=self.env, capture_output=True, text=True)
        self.assertEqual(got.stdout.strip(), want)
        self.assertNotEqual(want, "/tmp/sluice.sock")


if __name__ == "__main__":
    unittest.main(verbosity=2)
