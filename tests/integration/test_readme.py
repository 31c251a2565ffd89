"""README.md's examples, run in the order a reader follows them, against
real sluiced processes: what the README shows is what the product prints.

Every ```console block is a transcript: lines starting with "$ " are
commands (a line ending with a backslash, or an open here-document,
continues them; "$ # ..." is a remark), the lines after a command are what
it prints.  The commands run in one bash session, in a scratch directory
that looks like a checkout (build/bin, node/rls/proto), with SLUICE_SOCKET
pointing into it, as a reader at a shell would run them; each output is
compared with the README's.  A block either runs, or is listed in SKIPPED
with the reason it cannot (a cluster of hosts, Kubernetes); a new block
that is in neither fails the test, so no example escapes.

What may differ:
  - times: a field that counts down (retry_after, reset_after, Retry-After,
    t=, reset_in, waited) may differ by the block's tolerance, because a
    reader types slower than this test; its sign (-1: allowed) may not;
  - log timestamps and the socket's path, which depend on the day and the
    user;
  - the ports and paths, which the test picks free (the README's TCP ports
    8081, 9464 and 6380, UDP ports 17958 and 17959 and /tmp/rd are replaced
    in commands and outputs alike), and a granted lease's id, drawn at
    random (the README's id is replaced by the one printed from then on).

sluiced and sluicectl are on the PATH, as after `cmake --install build`,
for the examples that name them alone.

The reader's first terminal runs deploy/quickstart.sh, which ends in a
plain `build/bin/sluiced`: the test starts that.  A command that starts
sluiced in the foreground (no `&`) is a second terminal: it runs in the
background, its log is compared as it comes, and the previous foreground
daemon is stopped first, as the README asks (Ctrl-C).

The ```python and ```js snippets run too (redis-py; Node's ioredis when
the npm cache of test_ioredis.sh holds it, else that one is reported as
not run), the ```ini policy is loaded by sluiced --config, and the proxy
snippets (```nginx, ```caddyfile, the forwardAuth ```yaml) must be the
files in deploy/proxy/ that test_nginx.sh runs, less their opening comment.
"""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluicetest import BIN, ROOT, Daemon, free_tcp_port, free_udp_ports  # noqa: E402

README = os.path.join(ROOT, "README.md")

# Blocks that are not run, by their first command, with the reason.
SKIPPED = {
    "sluicectl -s /tmp/cl/n1.sock members":
        "a three-node cluster's view: life ids, demand and ages change with every run "
        "(test_cluster_sl checks the fields of `sluicectl key` and `members`)",
    "curl -si http://127.0.0.1:19461/ready | head -1; curl -s http://127.0.0.1:19461/ready":
        "three nodes, two of them killed with -9 (test_ready checks the same answers)",
}

# Per block (by first command): how far a time field may be from the README's,
# in the unit the block prints (seconds for CL.THROTTLE and sluicectl, ms for SL.*).
TOLERANCE = {
    # three calls on one line: the cold schedule's ms move with the time
    # between them (a few hundred ms on a loaded machine), far less than
    # the 1.2 s the acquire must be seen to wait
    "W=\"cache:1 ALGO warmup RATE 2 1000 WARMUP 5000\"": 400,
    # SL.ACQUIRE waits out the second's rest, however long the reader took
    "redis-cli -s \"$SLUICE_SOCKET\" SL.THROTTLE api:1 ALGO token-bucket BURST 9 RATE 100 1000 QTY 5":
        1000,
    # 24 s of debt, repaid while the reader types
    "redis-cli -s \"$SLUICE_SOCKET\" SL.THROTTLE llm:acme ALGO token-bucket BURST 999 RATE 1000 "
    "60000 QTY 0": 3000,
    # the refused lease waits for the first lease's TTL, taken while the reader typed
    "redis-cli -s \"$SLUICE_SOCKET\" SL.LEASE export:acme CONCURRENCY 2 TTL 60000 DETACH": 5000,
    # the calendar minute: anything in it
    "mkdir -p build/rls-py && (cd node/rls/proto && /usr/bin/python3 -m grpc_tools.protoc -I . \\":
        60,
}
DEFAULT_TOLERANCE = 2

# README snippets that are files of deploy/proxy/ (the yaml one: forwardAuth)
PROXY_FILES = {"nginx": "nginx-sluice.conf", "caddyfile": "Caddyfile-sluice"}

CMD_TIMEOUT = 30.0
DAEMON_LOG_TIMEOUT = 10.0
END = "__SLUICE_README_END__"


class Block:
    def __init__(self, lang, line, lines):
        self.lang, self.line, self.lines = lang, line, lines

    def steps(self):
        """[(command text, [expected lines])] of a console transcript."""
        steps = []
        i, lines = 0, self.lines
        while i < len(lines):
            ln = lines[i]
            if not ln.startswith("$ "):
                raise AssertionError("README.md:%d: output before any command: %r"
                                     % (self.line + i + 1, ln))
            cmd = [ln[2:]]
            heredoc = re.search(r"<<-?'?(\w+)'?", ln)
            i += 1
            while i < len(lines) and (cmd[-1].endswith("\\") or heredoc):
                cmd.append(lines[i])
                if heredoc and lines[i] == heredoc.group(1):
                    heredoc = None
                i += 1
            out = []
            while i < len(lines) and not lines[i].startswith("$ "):
                out.append(lines[i])
                i += 1
            steps.append(("\n".join(cmd), out))
        return steps

    def first(self):
        return self.lines[0][2:] if self.lines and self.lines[0].startswith("$ ") else ""


def readme_blocks():
    blocks, cur, lang, start = [], None, None, 0
    with open(README) as f:
        for n, ln in enumerate(f.read().split("\n"), 1):
            stripped = ln.strip()
            if cur is None and stripped.startswith("```"):
                cur, lang, start = [], stripped[3:].strip(), n
                indent = len(ln) - len(ln.lstrip())
            elif cur is not None and stripped == "```":
                blocks.append(Block(lang, start, cur))
                cur = None
            elif cur is not None:
                cur.append(ln[indent:] if ln[:indent].strip() == "" else ln)
    return blocks


# ---- comparing outputs ----

TIME_BEFORE = re.compile(r"(retry_after=|reset_after=|\bt=|Retry-After: |reset_in |"
                         r"'RateLimit-Reset': '|retryAfter: |resetAfter: )$")
INT_REPLY = re.compile(r"^(\s*\d+\) )\(integer\) (-?\d+)$")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
SOCKPATH = re.compile(r"\S*/sluice\.sock\b")


def normalize(line):
    line = line.rstrip("\r").rstrip()
    line = TIMESTAMP.sub("TIME", line)
    return SOCKPATH.sub("SOCK", line)


def time_close(got, want, tol):
    g, w = int(got), int(want)
    if (g < 0) != (w < 0):
        return False
    return g == w or (g >= 0 and abs(g - w) <= tol)


def line_matches(got, want, tol, array_index):
    """want as the README prints it against what the command printed."""
    got, want = normalize(got), normalize(want)
    if want.startswith("... "):  # an elided log prefix
        return got.endswith(want[4:])
    mw, mg = INT_REPLY.match(want), INT_REPLY.match(got)
    if mw and mg:
        if mw.group(1) != mg.group(1):
            return False
        # redis-cli's integer arrays of a decision: 4 retry, 5 reset, 6 waited
        index = int(mw.group(1).strip().rstrip(")"))
        if index >= 4 and array_index >= 5:
            return time_close(mg.group(2), mw.group(2), tol)
        return mg.group(2) == mw.group(2)
    pw = re.split(r"(-?\d+)", want)
    pg = re.split(r"(-?\d+)", got)
    if len(pw) != len(pg):
        return False
    for k in range(0, len(pw), 2):
        if pw[k] != pg[k]:
            return False
        if k + 1 < len(pw) and pw[k + 1] != pg[k + 1]:
            if not (TIME_BEFORE.search(pw[k]) and time_close(pg[k + 1], pw[k + 1], tol)):
                return False
    return True


def outputs_match(got, want, tol):
    if len(got) != len(want):
        return False
    # the length of a redis-cli integer array: its last index
    size = 0
    for w in want:
        m = INT_REPLY.match(w)
        if m:
            size = max(size, int(m.group(1).strip().rstrip(")")))
    return all(line_matches(g, w, tol, size) for g, w in zip(got, want))


def log_contains(got, want):
    """Every wanted line, in order, among the log's lines."""
    k = 0
    for g in got:
        if k < len(want) and line_matches(g, want[k], DEFAULT_TOLERANCE, 0):
            k += 1
    return k == len(want)


# ---- the reader's shell ----

class Shell:
    """One bash session, as a reader's terminal: commands run one after the
    other, exported variables and background jobs persist."""

    def __init__(self, cwd, env):
        self.proc = subprocess.Popen(["bash", "--norc", "--noprofile"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.buf = b""
        self.run("exec 2>&1; set +e")

    def run(self, cmd, timeout=CMD_TIMEOUT):
        self.proc.stdin.write(("{\n%s\n} </dev/null\necho; echo %s\n" % (cmd, END)).encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        marker = ("\n%s\n" % END).encode()
        while marker not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out running: %s\n(so far: %r)" % (cmd, self.buf))
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError("the shell ended running: %s" % cmd)
                self.buf += chunk
        out, self.buf = self.buf.split(marker, 1)
        return out.decode(errors="replace").split("\n")

    def close(self):
        self.proc.stdin.close()
        self.proc.stdout.close()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Readme(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-readme-")
        os.makedirs(os.path.join(self.tmp, "build"))
        os.symlink(os.path.abspath(BIN), os.path.join(self.tmp, "build", "bin"))
        os.makedirs(os.path.join(self.tmp, "node", "rls"))
        # a copy, not a link: the example writes to ../../../build from there
        shutil.copytree(os.path.join(ROOT, "node", "rls", "proto"),
                        os.path.join(self.tmp, "node", "rls", "proto"))
        run = os.path.join(self.tmp, "run")
        os.mkdir(run, 0o700)
        udp = free_udp_ports(2)
        self.ports = {"8081": str(free_tcp_port()), "9464": str(free_tcp_port()),
                      "6380": str(free_tcp_port()), "17958": str(udp[0]),
                      "17959": str(udp[1]), "/tmp/rd": os.path.join(self.tmp, "rd")}
        self.env = dict(os.environ)
        self.env["SLUICE_SOCKET"] = os.path.join(run, "sluice.sock")
        self.env["LC_ALL"] = "C.UTF-8"
        # redis-cli formats its replies ("1) (integer) 0") only on a
        # terminal, where the reader runs it; --no-raw does it here.
        wrap = os.path.join(self.tmp, "tty-bin")
        os.mkdir(wrap)
        with open(os.path.join(wrap, "redis-cli"), "w") as f:
            f.write("#!/bin/sh\nexec %s --no-raw \"$@\"\n" % shutil.which("redis-cli"))
        os.chmod(os.path.join(wrap, "redis-cli"), 0o755)
        self.env["PATH"] = "%s:%s:%s" % (wrap, os.path.abspath(BIN),
                                          self.env.get("PATH", "/usr/bin:/bin"))
        npm = os.path.join(BIN, "..", "npm-cache", "node_modules")
        self.env["NODE_PATH"] = os.path.abspath(npm)
        self.have_ioredis = os.path.isdir(os.path.join(npm, "ioredis"))
        self.shell = Shell(self.tmp, self.env)
        self.fg = None  # the foreground daemon: (pid, log path)
        self.nfg = 0
        self.failures = []

    def tearDown(self):
        self.shell.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def subst(self, text):
        for k, v in self.ports.items():
            text = text.replace(k, v)
        return text

    def where(self, block):
        return "README.md:%d" % block.line

    # A sluiced in the foreground: a terminal of its own.
    def start_foreground(self, cmd, want, block):
        self.stop_foreground()
        self.nfg += 1
        log = os.path.join(self.tmp, "fg-%d.log" % self.nfg)
        pid = self.shell.run("%s >%s 2>&1 &\necho $!" % (cmd, log))
        try:
            pid = int([p for p in pid if p.strip()][-1])
        except (IndexError, ValueError):
            raise AssertionError("%s: `%s` did not start: %s" % (self.where(block), cmd, pid))
        self.fg = (pid, log)
        deadline = time.monotonic() + DAEMON_LOG_TIMEOUT
        got = []
        # "... line": somewhere in the log, after the lines before it
        elided = any(w.startswith("... ") for w in want)
        while time.monotonic() < deadline:
            try:
                with open(log, errors="replace") as f:
                    got = [ln for ln in f.read().split("\n") if ln.strip()]
            except FileNotFoundError:
                got = []
            if elided and log_contains(got, want):
                break
            if not elided and len(got) >= len(want):
                break
            time.sleep(0.05)
        time.sleep(0.2)  # let it finish starting before the next command
        ok = (log_contains(got, want) if elided
              else outputs_match(got[:len(want)], want, DEFAULT_TOLERANCE))
        if not ok:
            self.failures.append("%s: `%s` logged:\n  %s\nthe README shows:\n  %s" % (
                self.where(block), cmd, "\n  ".join(got), "\n  ".join(want)))

    def stop_foreground(self):
        if self.fg is not None:
            self.shell.run("kill %d; wait %d" % (self.fg[0], self.fg[0]))
            self.fg = None

    def run_console(self, block):
        tol = DEFAULT_TOLERANCE
        for first, t in TOLERANCE.items():
            if block.first().startswith(first):
                tol = t
        for cmd, want in block.steps():
            if cmd.startswith("#"):
                continue
            cmd, want = self.subst(cmd), [self.subst(w) for w in want]
            words = cmd.split()
            if words and words[0].endswith("sluiced") and not cmd.rstrip().endswith("&"):
                self.start_foreground(cmd, want, block)
                continue
            got = self.shell.run(cmd)
            while got and got[-1] == "":
                got.pop()
            if cmd.rstrip().endswith("&"):
                time.sleep(0.5)  # a daemon in the background: let it bind
            if words[-1:] != ["DETACH"] or "SL.LEASE" not in words:
                pass
            elif len(got) == len(want) >= 5:
                # A granted lease's id is drawn at random: the README's id
                # stands for the one printed, here and in later commands.
                gid, wid = INT_REPLY.match(got[4]), INT_REPLY.match(want[4])
                if gid and wid and int(wid.group(2)) > 0 and int(gid.group(2)) > 0:
                    self.ports[wid.group(2)] = gid.group(2)
                    want = [self.subst(w) for w in want]
            if not outputs_match(got, want, tol):
                self.failures.append("%s: `%s` printed:\n  %s\nthe README shows:\n  %s" % (
                    self.where(block), cmd, "\n  ".join(got), "\n  ".join(want)))

    def run_python(self, block):
        path = os.path.join(self.tmp, "snippet.py")
        with open(path, "w") as f:
            f.write("\n".join(block.lines) + "\nassert limited in (0, 1) and limit == 16\n")
        got = self.shell.run("/usr/bin/python3 %s; echo \"exit $?\"" % path)
        if "exit 0" not in got:
            self.failures.append("%s: the Python snippet failed:\n  %s"
                                 % (self.where(block), "\n  ".join(got)))

    def check_proxy_snippet(self, block):
        name = PROXY_FILES.get(block.lang, "traefik-sluice.yaml")
        with open(os.path.join(ROOT, "deploy", "proxy", name)) as f:
            lines = f.read().rstrip("\n").split("\n")
        while lines and lines[0].startswith("#"):
            lines.pop(0)
        if block.lang == "yaml":
            import yaml  # Debian's python3-yaml
            same = yaml.safe_load("\n".join(lines)) == yaml.safe_load("\n".join(block.lines))
        else:
            same = lines == block.lines
        if not same:
            self.failures.append("%s: the snippet is not deploy/proxy/%s" % (self.where(block), name))

    def test_readme(self):
        blocks = readme_blocks()
        consoles = [b for b in blocks if b.lang == "console"]
        for b in consoles:
            b.steps()  # a transcript that does not parse fails here
        for first in SKIPPED:
            self.assertIn(first, [b.first() for b in consoles],
                          "SKIPPED names a block the README no longer has")
        # terminal 1: deploy/quickstart.sh ends in a plain sluiced
        self.start_foreground("build/bin/sluiced", [], Block("sh", 0, []))
        ran = skipped = 0
        js = None
        for b in blocks:
            if b.lang == "console" and b.first() in SKIPPED:
                print("not run: %s (%s)" % (self.where(b), SKIPPED[b.first()]))
                skipped += 1
            elif b.lang == "console" and b.first() == "node throttle.js":
                if js is None or not self.have_ioredis:
                    print("not run: %s (ioredis is not in the npm cache; "
                          "test_ioredis installs it)" % self.where(b))
                    skipped += 1
                    continue
                with open(os.path.join(self.tmp, "throttle.js"), "w") as f:
                    f.write("\n".join(js.lines) + "\n")
                self.run_console(b)
                ran += 1
            elif b.lang == "console":
                self.run_console(b)
                ran += 1
            elif b.lang == "python":
                self.run_python(b)
                ran += 1
            elif b.lang == "js":
                js = b
            elif b.lang in PROXY_FILES or (b.lang == "yaml" and "forwardAuth" in "\n".join(b.lines)):
                self.check_proxy_snippet(b)
                ran += 1
            elif b.lang == "ini":
                path = os.path.join(self.tmp, "policy.ini")
                with open(path, "w") as f:
                    f.write("\n".join(b.lines) + "\n")
                d = Daemon("--config", path, tmpdir=self.tmp,
                           socket_path=os.path.join(self.tmp, "ini.sock"))
                try:
                    with d:
                        pass
                except Exception as e:  # noqa: BLE001 (reported with the block)
                    self.failures.append("%s: sluiced --config refuses it: %s\n%s"
                                         % (self.where(b), e, d.logtext()))
                ran += 1
        self.stop_foreground()
        print("README: %d examples run, %d not run" % (ran, skipped))
        if self.failures:
            self.fail("%d README examples print something else:\n\n%s"
                      % (len(self.failures), "\n\n".join(self.failures)))


if __name__ == "__main__":
    unittest.main()
