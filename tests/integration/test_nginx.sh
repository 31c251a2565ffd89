#!/usr/bin/env bash
# A real nginx (Debian's nginx-light) in front of a small upstream, asking
# sluiced's /v1/throttle with auth_request before every request, driven
# with curl: allowed until the policy's limit, then 403 with Retry-After and
# the RateLimit fields passed back to the client.  The nginx config is the
# README's snippet (deploy/proxy/nginx-sluice.conf), so the snippet is
# what is tested.  The Caddy snippet is parse-checked with `caddy adapt`
# and the Traefik one loaded as YAML, when those are installed.
# Prints SKIP and exits 0 when nginx or curl is missing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SLUICE_BIN=${SLUICE_BIN:-$HERE/../../build/bin}
for tool in nginx curl; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not installed"
    exit 0
  fi
done

TMP=$(mktemp -d /tmp/sluice-nginx.XXXXXX)
SPID=""
cleanup() {
  [ -f "$TMP/nginx.pid" ] && kill "$(cat "$TMP/nginx.pid")" 2>/dev/null || true
  [ -n "$SPID" ] && kill "$SPID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
SLUICE_HTTP=$(free_port)
FRONT=$(free_port)
BACK=$(free_port)

cat >"$TMP/sluice.conf" <<EOF
[sluiced]
http = 127.0.0.1:$SLUICE_HTTP
http_deny_status = 403

[policy api]
algorithm = gcra
burst = 4
rate = 1 per 1h
EOF
"$SLUICE_BIN/sluiced" --socket "$TMP/sluice.sock" --config "$TMP/sluice.conf" >"$TMP/sluiced.log" 2>&1 &
SPID=$!

# The README's location blocks, with this test's ports.
sed -e "s/127.0.0.1:9464/127.0.0.1:$SLUICE_HTTP/" -e "s/127.0.0.1:8080/127.0.0.1:$BACK/" \
  "$HERE/../../deploy/proxy/nginx-sluice.conf" >"$TMP/sluice-locations.conf"
mkdir -p "$TMP/tmp"
cat >"$TMP/nginx.conf" <<EOF
daemon on;
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $TMP/tmp/body;
  proxy_temp_path $TMP/tmp/proxy;
  fastcgi_temp_path $TMP/tmp/fastcgi;
  uwsgi_temp_path $TMP/tmp/uwsgi;
  scgi_temp_path $TMP/tmp/scgi;
  server {
    listen 127.0.0.1:$FRONT;
    include $TMP/sluice-locations.conf;
  }
  server {
    listen 127.0.0.1:$BACK;
    location / { return 200 "upstream\n"; }
  }
}
EOF
nginx -t -q -c "$TMP/nginx.conf" -p "$TMP" 2>"$TMP/nginx-t.log" || { cat "$TMP/nginx-t.log" >&2; exit 1; }
nginx -c "$TMP/nginx.conf" -p "$TMP" 2>"$TMP/nginx-start.log"

for _ in $(seq 1 200); do
  curl -fs "http://127.0.0.1:$SLUICE_HTTP/health" >/dev/null 2>&1 \
    && curl -fs -o /dev/null "http://127.0.0.1:$BACK/" 2>/dev/null && break
  sleep 0.05
done

fail() {
  echo "FAIL: $*" >&2
  cat "$TMP/error.log" "$TMP/sluiced.log" >&2 2>/dev/null || true
  exit 1
}

# burst 4: five requests pass to the upstream, the sixth is refused.
for i in 1 2 3 4 5; do
  out=$(curl -s -D "$TMP/h$i" "http://127.0.0.1:$FRONT/api/items")
  code=$(head -1 "$TMP/h$i" | awk '{print $2}')
  [ "$code" = "200" ] || fail "request $i: status $code, body $out"
  [ "$out" = "upstream" ] || fail "request $i: body '$out' is not the upstream's"
  grep -qi '^RateLimit: "api";r=' "$TMP/h$i" || fail "request $i: no RateLimit field"
done
out=$(curl -s -D "$TMP/h6" "http://127.0.0.1:$FRONT/api/items")
code=$(head -1 "$TMP/h6" | awk '{print $2}')
[ "$code" = "403" ] || fail "request 6: status $code, expected 403"
grep -qi '^Retry-After: [0-9]' "$TMP/h6" || fail "request 6: no Retry-After"
grep -qi '^RateLimit: "api";r=0' "$TMP/h6" || fail "request 6: RateLimit does not say r=0"
echo "ok: nginx auth_request: 5 allowed, the 6th 403 with Retry-After $(grep -i '^Retry-After' "$TMP/h6" | tr -d '\r' | cut -d' ' -f2)"

if command -v caddy >/dev/null; then
  sed "s/127.0.0.1:9464/127.0.0.1:$SLUICE_HTTP/" "$HERE/../../deploy/proxy/Caddyfile-sluice" >"$TMP/Caddyfile"
  HOME=$TMP caddy adapt --config "$TMP/Caddyfile" --adapter caddyfile >"$TMP/caddy.json" \
    2>"$TMP/caddy.log" || { cat "$TMP/caddy.log" >&2; fail "the Caddy snippet does not adapt"; }
  grep -q '"/v1/throttle"\|v1/throttle' "$TMP/caddy.json" || fail "caddy: no /v1/throttle in the config"
  echo "ok: Caddy snippet adapts"
else
  echo "note: caddy not installed, Caddy snippet not checked"
fi
if /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
  /usr/bin/python3 - "$HERE/../../deploy/proxy/traefik-sluice.yaml" <<'PY' || fail "the Traefik snippet does not load"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
fa = doc["http"]["middlewares"]["sluice"]["forwardAuth"]
assert fa["address"].startswith("http://") and "/v1/throttle" in fa["address"], fa
assert "RateLimit" in fa["authResponseHeaders"], fa
PY
  echo "ok: Traefik snippet loads"
fi
