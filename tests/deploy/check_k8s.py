#!/usr/bin/python3
"""Checks deploy/kubernetes/ without a cluster.

No schema checker is available offline, so this checks what breaks a real
deployment of sluice and what a schema would not catch:

  - kustomization.yaml lists files that exist, lists no Secret (applying the
    directory must never replace the real cluster key) and nothing from
    optional/; every top-level manifest is listed;
  - selectors: the DaemonSet's selector matches its pod labels, every
    Service selects the pods, the optional ServiceMonitor selects a Service
    and names one of its ports;
  - ports: the container ports, the Services' target ports, the
    prometheus.io annotations and the probes agree with the addresses that
    sluiced will actually use (the ConfigMap's sluice.conf overridden by the
    container's flags): the gossip UDP port, the metrics TCP port (not bound
    to loopback, or neither probes nor Prometheus reach it), and the Unix
    socket's directory on the hostPath volume; probes hit a served port and
    a path that sluiced answers (/health, /metrics);
  - volumes: every volumeMount names a volume; the config file and the key
    file that sluiced reads are in mounted directories (not subPath, so
    edits reach the pods), from the ConfigMap and the Secret the Pod names,
    under the data keys that exist;
  - memory: the container's limit holds max_keys keys (the ConfigMap's, or
    sluiced's default) at 434 bytes each (the README's figure for a global
    key) plus 64 MiB;
  - sluice.conf: every section and key is one deploy/sluice.conf documents,
    and the real daemon accepts it: sluiced has no check-only mode, so the
    check starts it with the ConfigMap's file and the container's own flags
    (paths and addresses moved to a temporary directory and 127.0.0.1),
    waits for PING, GET /health and GET /metrics, then stops it (SIGTERM,
    exit status 0).  Skipped, and said so, when no sluiced is built;
  - `kubectl kustomize` builds the directory (offline) and its output has no
    Secret, when kubectl is installed (skipped, and said so, otherwise).

Usage:
  check_k8s.py [--dir deploy/kubernetes] [--bin build/bin] [--no-daemon]
  check_k8s.py --self-test     # the checks above, then each on a broken copy

The daemon is found in --bin, else $SLUICE_BIN, else build/bin.  Needs
PyYAML (Debian: python3-yaml).  Exit status 0 when every check passed.
"""

import argparse
import configparser
import copy
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.stderr.write("check_k8s: needs PyYAML (Debian package python3-yaml)\n")
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_DIR = os.path.join(ROOT, "deploy", "kubernetes")
REFERENCE_CONF = os.path.join(ROOT, "deploy", "sluice.conf")
SERVED_PATHS = ("/health", "/ready", "/metrics", "/v1/throttle")  # what sluiced's HTTP listener answers
DEFAULT_MAX_KEYS = 4194304  # sluiced's default max_keys (deploy/sluice.conf)
BYTES_PER_KEY = 434  # README: a global key served and owned, the costliest
BASE_BYTES = 64 << 20  # the daemon itself, clients and allocator, at the least


class Bundle:
    """The manifests: file name (relative to the directory) -> YAML docs."""

    def __init__(self, files):
        self.files = files

    @staticmethod
    def load(d):
        files = {}
        for sub in ("", "optional"):
            p = os.path.join(d, sub)
            if not os.path.isdir(p):
                continue
            for name in sorted(os.listdir(p)):
                if name.endswith((".yaml", ".yml")):
                    rel = os.path.join(sub, name) if sub else name
                    with open(os.path.join(d, rel)) as f:
                        files[rel] = [x for x in yaml.safe_load_all(f) if x is not None]
        return Bundle(files)

    def docs(self, names=None):
        for name, docs in self.files.items():
            if names is not None and name not in names:
                continue
            for doc in docs:
                if isinstance(doc, dict):
                    yield name, doc


def ns(doc):
    return (doc.get("metadata") or {}).get("namespace", "default")


def kind_is(doc, kind):
    return doc.get("kind") == kind


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def hostport(s):
    """'0.0.0.0:9464' / '[::]:9464' -> ('0.0.0.0', 9464)."""
    m = re.fullmatch(r"\[([^\]]*)\]:(\d+)|([^:\[\]]*):(\d+)", s.strip())
    if not m:
        return None
    host = m.group(1) if m.group(1) is not None else m.group(3)
    return host, int(m.group(2) or m.group(4))


def parse_conf(text):
    """sluice.conf as sluiced reads it (inih: ';'/'#' comment lines, ' ;'
    inline comments): {section: {key: value}}, plus problems."""
    out, problems, section = {}, [], None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        line = re.split(r"\s;", line, maxsplit=1)[0].strip()
        if line.startswith("["):
            if not line.endswith("]"):
                problems.append("line %d: bad section header %r" % (n, raw))
                continue
            section = line[1:-1].strip()
            out.setdefault(section, {})
            continue
        if "=" not in line:
            problems.append("line %d: not 'name = value': %r" % (n, raw))
            continue
        if section is None:
            problems.append("line %d: key outside of any section" % n)
            continue
        k, v = (x.strip() for x in line.split("=", 1))
        out[section][k] = v
    return out, problems


def reference_keys():
    """Sections and keys deploy/sluice.conf documents."""
    with open(REFERENCE_CONF) as f:
        conf, _ = parse_conf(f.read())
    keys = {"sluiced": set(), "cluster": set(), "policy": set()}
    for sec, kv in conf.items():
        keys["policy" if sec.startswith("policy ") else sec].update(kv)
    return keys


def quantity_bytes(q):
    """A Kubernetes memory quantity ('768Mi', '1G', '536870912') in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?|k)?", str(q).strip())
    if not m:
        return None
    mult = {None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mult)


def daemon_args(container):
    """The container's command line after the entrypoint, $(VAR) kept."""
    return list(container.get("command", [])[1:]) + list(container.get("args", []))


def flag(args, name):
    val = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith(name + "="):
            val = a.split("=", 1)[1]
    return val


def mount_for(path, mounts):
    """The volumeMount that holds path: a directory above it (the deepest),
    or a mount of the file itself (subPath)."""
    best = None
    for m in mounts:
        mp = m.get("mountPath", "").rstrip("/")
        if path == mp and m.get("subPath"):
            return m
        if path.startswith(mp + "/") and (best is None or len(mp) > len(best["mountPath"])):
            best = m
    return best


def key_in(path, mount):
    """The file's name inside its volume."""
    if path == mount["mountPath"].rstrip("/"):
        return mount.get("subPath", "")
    return os.path.relpath(path, mount["mountPath"])


class Checker:
    def __init__(self, bundle, bindir=None, run_daemon=True, quiet=False):
        self.b = bundle
        self.bindir = bindir
        self.run_daemon = run_daemon
        self.quiet = quiet
        self.errors = []
        self.notes = []

    def fail(self, msg):
        self.errors.append(msg)

    def note(self, msg):
        self.notes.append(msg)

    # ---- kustomization ----
    def check_kustomization(self):
        for name, doc in self.b.docs():
            if os.sep not in name and kind_is(doc, "Secret"):
                self.fail("%s: a Secret at the top of the directory: `kubectl apply -f` on the "
                          "directory would replace the real cluster key" % name)
        k = self.b.files.get("kustomization.yaml")
        if not k:
            self.fail("kustomization.yaml: missing")
            # Go on with every top-level file, to say what else is wrong.
            return {n for n in self.b.files if os.sep not in n}
        k = k[0]
        if k.get("kind") != "Kustomization":
            self.fail("kustomization.yaml: kind is %r, not Kustomization" % k.get("kind"))
        res = k.get("resources") or []
        listed = set()
        for r in res:
            r = os.path.normpath(r)
            if r not in self.b.files:
                self.fail("kustomization.yaml: lists %s, which does not exist" % r)
                continue
            listed.add(r)
            if r.startswith("optional" + os.sep) or "example" in r:
                self.fail("kustomization.yaml: lists %s, which is optional or an example" % r)
            for _, doc in self.b.docs({r}):
                if kind_is(doc, "Secret"):
                    self.fail("kustomization.yaml: %s holds a Secret (%s): applying the "
                              "directory would replace the real cluster key"
                              % (r, doc["metadata"].get("name")))
        for gen in ("secretGenerator",):
            if k.get(gen):
                self.fail("kustomization.yaml: has a %s (the key is created by hand)" % gen)
        for name in self.b.files:
            if os.sep not in name and name != "kustomization.yaml" and name not in listed:
                self.fail("kustomization.yaml: does not list %s" % name)
        return listed

    # ---- everything about the DaemonSet ----
    def check_daemonset(self, listed):
        dss = [d for _, d in self.b.docs(listed) if kind_is(d, "DaemonSet")]
        if len(dss) != 1:
            self.fail("expected one DaemonSet in the kustomization, found %d" % len(dss))
            return
        ds = dss[0]
        tmpl = ds["spec"].get("template") or {}
        meta = tmpl.get("metadata") or {}
        labels = meta.get("labels") or {}
        sel = (ds["spec"].get("selector") or {}).get("matchLabels") or {}
        if not selects(sel, labels):
            self.fail("DaemonSet %s: selector %s does not match the pod labels %s"
                      % (ds["metadata"]["name"], sel, labels))
        pod = tmpl.get("spec") or {}
        volumes = {v["name"]: v for v in pod.get("volumes") or []}

        # Services select the pods (all of them, optional ones too).
        services = {}
        for name, doc in self.b.docs():
            if kind_is(doc, "Service"):
                services[doc["metadata"]["name"]] = doc
                if ns(doc) != ns(ds):
                    self.fail("Service %s: namespace %s, DaemonSet's is %s"
                              % (doc["metadata"]["name"], ns(doc), ns(ds)))
                if not selects(doc["spec"].get("selector") or {}, labels):
                    self.fail("Service %s (%s): selector %s matches no sluice pod (labels %s)"
                              % (doc["metadata"]["name"], name, doc["spec"].get("selector"),
                                 labels))

        containers = pod.get("containers") or []
        main = [c for c in containers if c.get("name") == "sluiced"]
        if not main:
            self.fail("DaemonSet: no container named sluiced")
            return
        c = main[0]
        for cc in containers + (pod.get("initContainers") or []):
            for m in cc.get("volumeMounts") or []:
                if m.get("name") not in volumes:
                    self.fail("container %s: volumeMount %s names no volume of the pod"
                              % (cc.get("name"), m.get("name")))
        mounts = c.get("volumeMounts") or []
        args = daemon_args(c)

        # The config file: from the ConfigMap, in a mounted directory.
        conf_path = flag(args, "--config")
        conf_text = None
        if conf_path is None:
            self.fail("container sluiced: no --config flag")
        else:
            m = mount_for(conf_path, mounts)
            vol = volumes.get(m["name"]) if m else None
            if m is None or vol is None or "configMap" not in vol:
                self.fail("--config %s: not in a directory mounted from a ConfigMap" % conf_path)
            else:
                if m.get("subPath"):
                    self.fail("--config %s: mounted with subPath (edits never reach the pod)"
                              % conf_path)
                cm_name = vol["configMap"].get("name")
                cms = [d for _, d in self.b.docs(listed)
                       if kind_is(d, "ConfigMap") and d["metadata"]["name"] == cm_name
                       and ns(d) == ns(ds)]
                key = key_in(conf_path, m)
                if not cms:
                    self.fail("ConfigMap %s (volume %s): not in the kustomization"
                              % (cm_name, m["name"]))
                elif key not in (cms[0].get("data") or {}):
                    self.fail("ConfigMap %s: no data key %r for --config %s"
                              % (cm_name, key, conf_path))
                else:
                    conf_text = cms[0]["data"][key]
        if conf_text is None:
            return
        conf, problems = parse_conf(conf_text)
        for p in problems:
            self.fail("sluice.conf: " + p)
        self.check_conf_keys(conf)
        sl = conf.get("sluiced", {})
        cl = conf.get("cluster", {})

        # What sluiced will use: the file, overridden by the flags.
        socket_path = flag(args, "--socket") or sl.get("socket")
        metrics = (flag(args, "--http") or flag(args, "--metrics") or sl.get("http")
                   or sl.get("metrics", "off"))
        gossip = flag(args, "--gossip-bind") or cl.get("gossip_bind")
        advertise = flag(args, "--advertise") or cl.get("advertise")
        join = flag(args, "--join") or cl.get("join")
        key_file = flag(args, "--cluster-key-file") or cl.get("cluster_key_file")

        ports = c.get("ports") or []
        by_name = {p.get("name"): p for p in ports if p.get("name")}

        def port_of(ref):
            """A probe's or Service's port (name or number) -> containerPort entry."""
            if isinstance(ref, str) and not ref.isdigit():
                return by_name.get(ref)
            for p in ports:
                if p.get("containerPort") == int(ref):
                    return p
            return None

        # Memory: the limit holds max_keys keys at the README's bytes per key.
        max_keys = int(flag(args, "--max-keys") or sl.get("max_keys") or DEFAULT_MAX_KEYS)
        limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
        need = max_keys * BYTES_PER_KEY + BASE_BYTES
        if limit is None:
            self.fail("container sluiced: no memory limit")
        elif quantity_bytes(limit) is None:
            self.fail("container sluiced: memory limit %r is not a quantity" % limit)
        elif quantity_bytes(limit) < need:
            self.fail("memory limit %s < %d MiB: max_keys %d at %d bytes a key, plus %d MiB "
                      "(the pod would be OOM-killed before the table is full)"
                      % (limit, need >> 20, max_keys, BYTES_PER_KEY, BASE_BYTES >> 20))

        # Gossip: UDP, the container's port, the advertised port, the Service.
        gossip_port = None
        if gossip is None:
            self.fail("sluice.conf: no gossip_bind in [cluster] and no --gossip-bind")
        else:
            hp = hostport(gossip)
            if hp is None:
                self.fail("gossip address %r is not host:port" % gossip)
            else:
                gossip_port = hp[1]
                udp = [p for p in ports if p.get("containerPort") == gossip_port
                       and p.get("protocol") == "UDP"]
                if not udp:
                    self.fail("gossip binds UDP port %d; the container declares %s"
                              % (gossip_port, [(p.get("containerPort"), p.get("protocol", "TCP"))
                                               for p in ports]))
                if advertise and hostport(advertise) and hostport(advertise)[1] != gossip_port:
                    self.fail("--advertise %s: port differs from the gossip port %d"
                              % (advertise, gossip_port))
        # join names the headless Service and its port.
        if join and gossip_port:
            for item in join.split(","):
                hp = hostport(item)
                if hp is None:
                    continue
                host, port = hp
                parts = host.split(".")
                svc = services.get(parts[0])
                if svc is None:
                    self.fail("join %s: no Service named %s" % (item.strip(), parts[0]))
                    continue
                if len(parts) > 1 and parts[1] != ns(svc):
                    self.fail("join %s: namespace %s, the Service's is %s"
                              % (item.strip(), parts[1], ns(svc)))
                if svc["spec"].get("clusterIP") != "None":
                    self.fail("Service %s: not headless (its name would resolve to one "
                              "virtual IP, not to every pod)" % parts[0])
                if not svc["spec"].get("publishNotReadyAddresses"):
                    self.fail("Service %s: publishNotReadyAddresses is not true (starting pods "
                              "could not find each other)" % parts[0])
                sp = [p for p in svc["spec"].get("ports") or [] if p.get("port") == port]
                if not sp:
                    self.fail("join %s: Service %s has no port %d" % (item.strip(), parts[0], port))
                elif sp[0].get("protocol") != "UDP":
                    self.fail("Service %s port %d: protocol %s, gossip is UDP"
                              % (parts[0], port, sp[0].get("protocol", "TCP")))

        # Every Service port leads to a declared container port.
        for sname, svc in services.items():
            for sp in svc["spec"].get("ports") or []:
                tp = sp.get("targetPort", sp.get("port"))
                cp = port_of(tp)
                if cp is None:
                    self.fail("Service %s port %s: targetPort %s is no container port"
                              % (sname, sp.get("name"), tp))
                elif cp.get("protocol", "TCP") != sp.get("protocol", "TCP"):
                    self.fail("Service %s port %s: protocol %s, the container port's is %s"
                              % (sname, sp.get("name"), sp.get("protocol", "TCP"),
                                 cp.get("protocol", "TCP")))

        # Metrics: served on a TCP port that is declared, annotated, probed.
        metrics_port = None
        if metrics == "off":
            self.fail("metrics are off (sluice.conf http = off and no --http): nothing "
                      "to scrape or probe")
        else:
            hp = hostport(metrics)
            if hp is None:
                self.fail("metrics address %r is not host:port" % metrics)
            else:
                host, metrics_port = hp
                if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
                    self.fail("metrics bound to %s: neither the kubelet's probes nor Prometheus "
                              "reach loopback in the pod" % host)
                tcp = [p for p in ports if p.get("containerPort") == metrics_port
                       and p.get("protocol", "TCP") == "TCP"]
                if not tcp:
                    self.fail("metrics on TCP port %d; the container declares no such port"
                              % metrics_port)
        ann = meta.get("annotations") or {}
        if ann.get("prometheus.io/scrape") != "true":
            self.fail("pod template: no prometheus.io/scrape: \"true\" annotation")
        if metrics_port is not None and ann.get("prometheus.io/port") != str(metrics_port):
            self.fail("pod template: prometheus.io/port is %r, metrics are on %d"
                      % (ann.get("prometheus.io/port"), metrics_port))
        if ann.get("prometheus.io/path", "/metrics") != "/metrics":
            self.fail("pod template: prometheus.io/path %r is not /metrics"
                      % ann.get("prometheus.io/path"))

        # Probes: an HTTP GET on a served path of the metrics port.
        for pname in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = c.get(pname)
            if probe is None:
                if pname != "startupProbe":
                    self.fail("container sluiced: no %s" % pname)
                continue
            if "httpGet" in probe:
                hg = probe["httpGet"]
                cp = port_of(hg.get("port"))
                if cp is None:
                    self.fail("%s: port %r is no container port" % (pname, hg.get("port")))
                elif cp.get("protocol", "TCP") != "TCP" or cp.get("containerPort") != metrics_port:
                    self.fail("%s: port %r (%s/%s) is not the metrics port %s, where sluiced "
                              "serves HTTP" % (pname, hg.get("port"), cp.get("containerPort"),
                                               cp.get("protocol", "TCP"), metrics_port))
                if hg.get("path") not in SERVED_PATHS:
                    self.fail("%s: path %r is not one sluiced serves %s"
                              % (pname, hg.get("path"), SERVED_PATHS))
                # Readiness is /ready (alone, partitioned, refused, not
                # synced: not ready); liveness is /health, which must not
                # restart a pod that is merely cut off from its peers.
                want = {"readinessProbe": "/ready", "livenessProbe": "/health"}.get(pname)
                if want is not None and hg.get("path") != want:
                    self.fail("%s: path %r, want %s" % (pname, hg.get("path"), want))
            elif "exec" in probe:
                s = flag(probe["exec"].get("command", []), "-s")
                if s is not None and s != socket_path:
                    self.fail("%s: sluicectl -s %s, the daemon listens on %s"
                              % (pname, s, socket_path))
            else:
                self.fail("%s: neither httpGet nor exec" % pname)

        # The RESP socket: on the hostPath volume, same directory in the
        # init container that chowns it.
        if not socket_path:
            self.fail("no socket in [sluiced] and no --socket")
        else:
            m = mount_for(socket_path, mounts)
            vol = volumes.get(m["name"]) if m else None
            if vol is None or "hostPath" not in vol:
                self.fail("socket %s: not in a hostPath volume (applications on the node "
                          "could not reach it)" % socket_path)
            elif os.path.dirname(socket_path) != m["mountPath"].rstrip("/"):
                self.fail("socket %s: not directly in the mount %s"
                          % (socket_path, m["mountPath"]))
            for ic in pod.get("initContainers") or []:
                ims = [x for x in ic.get("volumeMounts") or [] if m and x.get("name") == m["name"]]
                if ims and ims[0].get("mountPath") != m["mountPath"]:
                    self.fail("initContainer %s mounts %s at %s, sluiced at %s"
                              % (ic.get("name"), m["name"], ims[0].get("mountPath"),
                                 m["mountPath"]))

        # The key file: from the Secret, in a mounted directory.
        if key_file:
            m = mount_for(key_file, mounts)
            vol = volumes.get(m["name"]) if m else None
            if vol is None or "secret" not in vol:
                self.fail("cluster_key_file %s: not in a directory mounted from a Secret"
                          % key_file)
            else:
                if m.get("subPath"):
                    self.fail("cluster_key_file %s: mounted with subPath (rotation never "
                              "reaches the pod)" % key_file)
                sname = vol["secret"].get("secretName")
                key = key_in(key_file, m)
                ex = [d for _, d in self.b.docs() if kind_is(d, "Secret")]
                if not ex:
                    self.fail("no example Secret (optional/secret.example.yaml) shows the format")
                for d in ex:
                    if d["metadata"]["name"] != sname or ns(d) != ns(ds):
                        self.fail("example Secret %s/%s: the pod mounts %s/%s"
                                  % (ns(d), d["metadata"]["name"], ns(ds), sname))
                    keys = set((d.get("data") or {})) | set((d.get("stringData") or {}))
                    if key not in keys:
                        self.fail("example Secret: no key %r (cluster_key_file %s)"
                                  % (key, key_file))
                if vol["secret"].get("defaultMode", 0o644) & 0o007:
                    self.fail("Secret volume mode %o: others can read the key, sluiced refuses it"
                              % vol["secret"]["defaultMode"])

        # The optional ServiceMonitor: selects a Service with the named port.
        for _, sm in self.b.docs():
            if not kind_is(sm, "ServiceMonitor"):
                continue
            sel = (sm["spec"].get("selector") or {}).get("matchLabels") or {}
            hits = [s for s in services.values()
                    if selects(sel, (s.get("metadata") or {}).get("labels") or {})]
            if not hits:
                self.fail("ServiceMonitor %s: selector %s matches no Service"
                          % (sm["metadata"]["name"], sel))
            for ep in sm["spec"].get("endpoints") or []:
                for s in hits:
                    sp = [p for p in s["spec"].get("ports") or [] if p.get("name") == ep.get("port")]
                    if not sp:
                        self.fail("ServiceMonitor %s: Service %s has no port named %r"
                                  % (sm["metadata"]["name"], s["metadata"]["name"], ep.get("port")))
                    elif port_of(sp[0].get("targetPort", sp[0].get("port"))) is not None and \
                            port_of(sp[0].get("targetPort", sp[0].get("port"))).get(
                                "containerPort") != metrics_port:
                        self.fail("ServiceMonitor %s: port %r does not lead to the metrics port"
                                  % (sm["metadata"]["name"], ep.get("port")))
                if ep.get("path", "/metrics") != "/metrics":
                    self.fail("ServiceMonitor %s: path %r" % (sm["metadata"]["name"], ep.get("path")))

        if self.run_daemon:
            self.check_with_daemon(conf_text, args, c.get("env") or [])

    def check_conf_keys(self, conf):
        ref = reference_keys()
        for sec, kv in conf.items():
            group = "policy" if sec.startswith("policy ") else sec
            if group not in ref:
                self.fail("sluice.conf: section [%s] is not one deploy/sluice.conf documents" % sec)
                continue
            for k in kv:
                if k not in ref[group]:
                    self.fail("sluice.conf: [%s] %s is not a key deploy/sluice.conf documents"
                              % (sec, k))

    # ---- the real daemon ----
    def find_bin(self, name):
        for d in (self.bindir, os.environ.get("SLUICE_BIN"), os.path.join(ROOT, "build", "bin")):
            if d and os.access(os.path.join(d, name), os.X_OK):
                return os.path.join(d, name)
        return None

    def check_with_daemon(self, conf_text, args, env):
        sluiced, sluicectl = self.find_bin("sluiced"), self.find_bin("sluicectl")
        if sluiced is None or sluicectl is None:
            self.note("SKIP daemon check: no sluiced/sluicectl (build first, or --bin DIR)")
            return
        tmp = tempfile.mkdtemp(prefix="sluice-k8s-check.")
        proc = None
        try:
            conf = os.path.join(tmp, "sluice.conf")
            with open(conf, "w") as f:
                f.write(conf_text)
            key = os.path.join(tmp, "cluster.key")
            subprocess.run([sluicectl, "keygen", "-o", key], check=True,
                           stdout=subprocess.DEVNULL)
            sock = os.path.join(tmp, "sluice.sock")
            gport, mport = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
            # The container's own flags, $(VAR)s given values, then what must
            # move off the pod's paths and addresses (later flags win).
            values = {"NODE_NAME": "check-node", "POD_IP": "127.0.0.1"}
            for e in env:
                values.setdefault(e["name"], e.get("value", "x"))
            run = []
            for a in args:
                run.append(re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)), a))
            for i, a in enumerate(run):
                if a == "--config":
                    run[i + 1] = conf
            run += ["--socket", sock, "--cluster-key-file", key,
                    "--gossip-bind", "127.0.0.1:%d" % gport,
                    "--advertise", "127.0.0.1:%d" % gport,
                    "--join", "127.0.0.1:%d" % gport,
                    "--metrics", "127.0.0.1:%d" % mport]
            log = open(os.path.join(tmp, "log"), "w+")
            proc = subprocess.Popen([sluiced] + run, stdout=log, stderr=subprocess.STDOUT)
            up = False
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and proc.poll() is None:
                if resp_ping(sock):
                    up = True
                    break
                time.sleep(0.05)
            if not up:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                log.seek(0)
                why = " / ".join(log.read().strip().splitlines()[:2])
                self.fail("sluiced with the ConfigMap's sluice.conf and the container's flags "
                          "did not start (exit %s): %s" % (proc.returncode, why))
                proc = None
                return
            for path, want in (("/health", "ok"), ("/metrics", "sluice_"), ("/ready", "ready")):
                try:
                    body = urllib.request.urlopen(
                        "http://127.0.0.1:%d%s" % (mport, path), timeout=5).read().decode()
                    if want not in body:
                        self.fail("GET %s: %r has no %r" % (path, body[:80], want))
                except urllib.error.HTTPError as e:
                    # /ready answers 503 "not ready: <reason>" here: this
                    # lone pod's seeds (the headless Service) do not resolve.
                    body = e.read().decode()
                    if path != "/ready" or e.code != 503 or not body.startswith("not ready: "):
                        self.fail("GET %s: %s %r" % (path, e.code, body[:80]))
                except OSError as e:
                    self.fail("GET %s on the metrics listener: %s" % (path, e))
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = "none (killed after 10 s)"
            proc = None
            if rc != 0:
                self.fail("sluiced exited with status %s after SIGTERM" % rc)
            else:
                self.note("sluiced %s accepted the ConfigMap's sluice.conf and the container's "
                          "flags (PING, /health, /ready, /metrics answered)" % sluiced)
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)

    def check_kustomize_build(self, d):
        """`kubectl kustomize` (offline), when kubectl is installed."""
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            self.note("SKIP kubectl kustomize: no kubectl")
            return
        r = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            self.fail("kubectl kustomize %s: %s" % (d, r.stderr.strip()))
            return
        kinds = [doc.get("kind") for doc in yaml.safe_load_all(r.stdout) if doc]
        if "Secret" in kinds:
            self.fail("kubectl kustomize %s: the output has a Secret" % d)
        self.note("kubectl kustomize: %s" % ", ".join(kinds))

    def run(self, d=None):
        if d is not None:
            self.check_kustomize_build(d)
        listed = self.check_kustomization()
        self.check_daemonset(listed)
        return not self.errors


def free_port(kind):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resp_ping(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


# ---- self-test: every check must fail on a copy broken on purpose ----

def _ds(b):
    return [d for _, d in b.docs() if kind_is(d, "DaemonSet")][0]


def _sluiced(b):
    return [c for c in _ds(b)["spec"]["template"]["spec"]["containers"]
            if c["name"] == "sluiced"][0]


def _cm(b):
    return [d for _, d in b.docs() if kind_is(d, "ConfigMap")][0]


def _conf_sub(old, new):
    def f(b):
        cm = _cm(b)
        assert old in cm["data"]["sluice.conf"], old
        cm["data"]["sluice.conf"] = cm["data"]["sluice.conf"].replace(old, new, 1)
    return f


def _kust(b):
    return b.files["kustomization.yaml"][0]


def _port(b, name):
    return [p for p in _sluiced(b)["ports"] if p["name"] == name][0]


BREAKAGES = [
    ("the example Secret in the kustomization",
     lambda b: _kust(b)["resources"].append("optional/secret.example.yaml"), False),
    ("a Secret manifest in the kustomization",
     lambda b: (b.files.__setitem__("secret.yaml", copy.deepcopy(
         b.files["optional/secret.example.yaml"])),
         _kust(b)["resources"].append("secret.yaml")), False),
    ("a file in the kustomization that does not exist",
     lambda b: _kust(b)["resources"].append("nosuch.yaml"), False),
    ("a top-level manifest left out of the kustomization",
     lambda b: _kust(b)["resources"].remove("service.yaml"), False),
    ("pod labels that the selector does not match",
     lambda b: _ds(b)["spec"]["template"]["metadata"]["labels"].update(app="other"), False),
    ("a Service selecting no pod",
     lambda b: b.files["service.yaml"][0]["spec"]["selector"].update(app="sluicex"), False),
    ("the gossip container port off by one",
     lambda b: _port(b, "gossip").update(containerPort=7947), False),
    ("gossip declared as TCP",
     lambda b: _port(b, "gossip").update(protocol="TCP"), False),
    ("the ConfigMap's gossip port changed, not the pod's",
     _conf_sub("gossip_bind = 0.0.0.0:7946", "gossip_bind = 0.0.0.0:7950"), False),
    ("the ConfigMap's metrics port changed, not the pod's",
     _conf_sub("http = 0.0.0.0:9464", "http = 0.0.0.0:9465"), False),
    ("metrics off",
     _conf_sub("http = 0.0.0.0:9464", "http = off"), False),
    ("metrics on loopback",
     _conf_sub("http = 0.0.0.0:9464", "http = 127.0.0.1:9464"), False),
    ("a probe on the gossip (UDP) port",
     lambda b: _sluiced(b)["readinessProbe"]["httpGet"].update(port="gossip"), False),
    ("a probe on a port nothing serves",
     lambda b: _sluiced(b)["livenessProbe"]["httpGet"].update(port=8080), False),
    ("a probe on a path sluiced does not serve",
     lambda b: _sluiced(b)["livenessProbe"]["httpGet"].update(path="/healthz"), False),
    ("readiness on /health (ok even when cut off from the cluster)",
     lambda b: _sluiced(b)["readinessProbe"]["httpGet"].update(path="/health"), False),
    ("liveness on /ready (a partition would restart every pod)",
     lambda b: _sluiced(b)["livenessProbe"]["httpGet"].update(path="/ready"), False),
    ("a volumeMount naming no volume",
     lambda b: _sluiced(b)["volumeMounts"].append({"name": "nosuch", "mountPath": "/x"}), False),
    ("the ConfigMap mounted with subPath again",
     lambda b: (_sluiced(b)["volumeMounts"][1].update(
         mountPath="/etc/sluice/config/sluice.conf", subPath="sluice.conf")) and None, False),
    ("--config pointing at a file the ConfigMap does not have",
     lambda b: _sluiced(b)["args"].__setitem__(1, "/etc/sluice/config/other.conf"), False),
    ("the socket moved off the hostPath volume",
     _conf_sub("socket = /run/sluice/sluice.sock", "socket = /tmp/sluice.sock"), False),
    ("the key file outside the Secret's mount",
     _conf_sub("cluster_key_file = /etc/sluice/key/cluster.key",
               "cluster_key_file = /etc/sluice/cluster.key"), False),
    ("the prometheus.io/port annotation wrong",
     lambda b: _ds(b)["spec"]["template"]["metadata"]["annotations"].update(
         {"prometheus.io/port": "9090"}), False),
    ("join naming a Service that does not exist",
     _conf_sub("join = sluice-peers.", "join = sluice-peer."), False),
    ("max_keys left at the default (4,194,304) under a 768Mi limit",
     _conf_sub("max_keys = 1048576\n", ""), False),
    ("a memory limit too small for max_keys",
     lambda b: _sluiced(b)["resources"]["limits"].update(memory="256Mi"), False),
    ("a key sluice.conf does not document",
     _conf_sub("log_level = info", "log_level = info\n    loglevel = info"), False),
    # Only the real daemon catches these two: the keys are right, the values wrong.
    ("a policy rate sluiced cannot parse",
     _conf_sub("rate = 1000 per 1s", "rate = 1000 per fortnight"), True),
    ("a flag sluiced does not have (--metrics-bind)",
     lambda b: _sluiced(b)["args"].extend(["--metrics-bind", "0.0.0.0:9464"]), True),
]


def self_test(bundle, bindir, d):
    passed = failed = 0
    base = Checker(copy.deepcopy(bundle), bindir)
    ok = base.run(d)
    have_daemon = any(n.startswith("sluiced ") for n in base.notes)
    for n in base.notes:
        print("  " + n)
    if ok:
        print("PASS the manifests as they are")
        passed += 1
    else:
        print("FAIL the manifests as they are:\n    " + "\n    ".join(base.errors))
        failed += 1
    for what, breakit, needs_daemon in BREAKAGES:
        if needs_daemon and not have_daemon:
            print("SKIP broken: %s (needs the built sluiced)" % what)
            continue
        b = copy.deepcopy(bundle)
        breakit(b)
        ch = Checker(b, bindir, run_daemon=needs_daemon)
        if ch.run():
            print("FAIL broken: %s -- not caught" % what)
            failed += 1
        else:
            print("PASS broken: %s -- caught: %s" % (what, ch.errors[0]))
            passed += 1
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=DEFAULT_DIR, help="the manifests (default deploy/kubernetes)")
    ap.add_argument("--bin", default=None, help="where sluiced and sluicectl are")
    ap.add_argument("--no-daemon", action="store_true", help="do not start sluiced")
    ap.add_argument("--self-test", action="store_true",
                    help="also break a copy in each way the checks must catch")
    a = ap.parse_args()
    bundle = Bundle.load(a.dir)
    if a.self_test:
        passed, failed = self_test(bundle, a.bin, a.dir)
    else:
        ch = Checker(bundle, a.bin, run_daemon=not a.no_daemon)
        ok = ch.run(a.dir)
        for n in ch.notes:
            print(n)
        for e in ch.errors:
            print("FAIL " + e)
        passed, failed = (1, 0) if ok else (0, 1)
        if ok:
            print("PASS %s" % os.path.relpath(a.dir))
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
