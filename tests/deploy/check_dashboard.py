"""The Grafana dashboard (deploy/grafana/sluice-dashboard.json) against the
metrics a real sluiced serves: the file is valid JSON in Grafana's
dashboard shape (unique panel ids, a Prometheus query per target, the
$datasource and $instance variables it uses defined), and every metric a
query names exists in the exposition of a clustered node with the HTTP
listener on.  So a renamed or removed metric breaks this check, not a
dashboard nobody looks at.  A standalone node serves no cluster series:
a query that combines them with the local ones must guard each with
`or vector(0)`, or the panel is empty on such a node.  Prints SKIP (exit 0) when sluiced is not built."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DASH = os.path.join(ROOT, "deploy", "grafana", "sluice-dashboard.json")
BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "bin"))
HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def check_shape(dash):
    """Returns the metric names the queries use; raises on a bad shape."""
    assert dash.get("title") and dash.get("uid"), "title and uid are required"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance"} <= variables, variables
    ids, names = set(), set()
    assert dash["panels"], "no panels"
    for p in dash["panels"]:
        assert p["id"] not in ids, "panel id %s twice" % p["id"]
        ids.add(p["id"])
        assert p.get("title"), "a panel without a title"
        gp = p["gridPos"]
        assert 0 <= gp["x"] and gp["x"] + gp["w"] <= 24, (p["title"], gp)
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], "panel %r has no query" % p["title"]
        for t in p["targets"]:
            expr = t["expr"]
            assert expr.count("(") == expr.count(")"), (p["title"], expr)
            for var in re.findall(r"\$(\w+)", expr):
                assert var in variables or var.startswith("__"), (p["title"], var)
            found = set(re.findall(r"\bsluice_[a-z_]+", expr))
            assert found, "query of %r names no sluice metric: %s" % (p["title"], expr)
            names |= found
    return names


def scrape_names(clustered=True):
    """Metric family names (and histogram series names) of a live node."""
    http, udp = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_DGRAM)
    with tempfile.TemporaryDirectory(prefix="sluice-dash-") as tmp:
        args = [os.path.join(BIN, "sluiced"), "--socket", os.path.join(tmp, "s.sock"),
                "--http", "127.0.0.1:%d" % http]
        if clustered:
            args += ["--gossip-bind", "127.0.0.1:%d" % udp, "--insecure-no-encryption",
                     "--node-name", "dash"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http,
                                                timeout=5) as r:
                        text = r.read().decode()
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            names.add(name)
            if kind == "histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def main():
    with open(DASH) as f:
        dash = json.load(f)
    used = check_shape(dash)
    if not os.access(os.path.join(BIN, "sluiced"), os.X_OK):
        print("SKIP: %s/sluiced not built; the shape is fine" % BIN)
        return 0
    served = scrape_names()
    missing = sorted(n for n in used if n not in served)
    assert not missing, "the dashboard queries metrics sluiced does not serve: %s" % missing
    # A standalone node: a query mixing its series with absent cluster ones
    # answers nothing unless each absent one is guarded.
    alone = scrape_names(clustered=False)
    empty = []
    for p in dash["panels"]:
        for t in p["targets"]:
            found = set(re.findall(r"\bsluice_[a-z_]+", t["expr"]))
            absent = {n for n in found if n not in alone}
            if not absent or absent == found:
                continue  # all there, or a cluster-only panel
            for n in absent:
                guarded = re.search(r"\(sum\(rate\(%s\{[^}]*\}\[[^\]]*\]\)\) or vector\(0\)\)"
                                    % n, t["expr"])
                if not guarded:
                    empty.append("%s (%s)" % (p["title"], n))
    assert not empty, ("panels empty on a standalone node (guard the cluster series with "
                       "`or vector(0)`): %s" % empty)
    unused = sorted(n for n in served if n not in used and not HISTOGRAM_SUFFIX.search(n))
    print("ok: %d panels, %d metrics queried, all served (not on the dashboard: %s)"
          % (len(dash["panels"]), len(used), ", ".join(unused) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
