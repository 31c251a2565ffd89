#!/usr/bin/env bash
# A real nginx (Debian's nginx-light) in front of a small upstream, asking
# sluiced's /v1/throttle with auth_request before every request, driven
# with curl: allowed until the policy's limit, then 429 (sluice's 403, which
# auth_request needs, mapped) with Retry-After and the RateLimit fields
# passed back to the client; with sluiced stopped, the snippet fails closed
# (500) and its fail-open variant (the #fail-open: lines) lets requests
# through.  Caddy's answers carry the RateLimit fields, 200s included.  The nginx config is the
# README's snippet (deploy/proxy/nginx-sluice.conf), so the snippet is
# what is tested.  A hostile end user then sends X-Sluice-Cost: 0 and
# X-Sluice-Key: <victim> through nginx and through a real Caddy running the
# README's Caddyfile; sluiced here reads X-Sluice-* headers
# (http_trust_headers = on) so that only the snippets' stripping stands
# between the client and the limit: an exhausted key stays refused and the
# victim's key is untouched.  The Traefik snippet is loaded as YAML.
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
http_trust_headers = on

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
# The fail-open variant: the same with its commented lines on.
FRONT_OPEN=$(free_port)
sed -e 's/#fail-open: //' "$TMP/sluice-locations.conf" >"$TMP/sluice-locations-open.conf"
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
    listen 127.0.0.1:$FRONT_OPEN;
    include $TMP/sluice-locations-open.conf;
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
[ "$code" = "429" ] || fail "request 6: status $code, expected 429"
[ "$out" = "limited" ] || fail "request 6: body '$out'"
grep -qi '^Retry-After: [0-9]' "$TMP/h6" || fail "request 6: no Retry-After"
grep -qi '^RateLimit: "api";r=0' "$TMP/h6" || fail "request 6: RateLimit does not say r=0"
grep -qi '^RateLimit-Policy: "api";q=5' "$TMP/h6" || fail "request 6: no RateLimit-Policy"
echo "ok: nginx auth_request: 5 allowed, the 6th 429 with Retry-After $(grep -i '^Retry-After' "$TMP/h6" | tr -d '\r' | cut -d' ' -f2)"

# A hostile end user behind nginx: its own X-Sluice-* headers must not reach
# sluice.  The key (127.0.0.1) is exhausted: cost 0, another key, another
# policy, a huge burst all stay refused.
hostile=(-H 'X-Sluice-Cost: 0' -H 'X-Sluice-Key: victim' -H 'X-Sluice-Policy: none'
         -H 'X-Sluice-Burst: 100000' -H 'X-Sluice-Count: 100000' -H 'X-Sluice-Period: 1')
passed=0
for _ in $(seq 1 20); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "${hostile[@]}" "http://127.0.0.1:$FRONT/api/items")
  [ "$code" = "200" ] && passed=$((passed + 1))
done
[ "$passed" = "0" ] || fail "nginx: $passed of 20 hostile requests passed an exhausted key"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SLUICE_HTTP/v1/throttle?policy=api&key=victim")
[ "$code" = "200" ] || fail "nginx: the victim's key was spent by a hostile X-Sluice-Key ($code)"
echo "ok: nginx: 0 of 20 requests with X-Sluice-Cost: 0 / X-Sluice-Key passed; the victim's key untouched"

# The snippet strips what sluice would otherwise read: a fresh client
# (another loopback source address, another key) sending X-Sluice-Cost: 3
# gets the 5 requests anyone gets, not 1 (which it would if sluice saw cost 3).
cost_probe() { # FRONT SOURCE -> number of 6 requests allowed
  local n=0 code
  for _ in 1 2 3 4 5 6; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --interface "$2" -H 'X-Sluice-Cost: 3' \
      "http://127.0.0.1:$1/api/items" || true)
    [ "$code" = "200" ] && n=$((n + 1))
  done
  echo "$n"
}
n=$(cost_probe "$FRONT" 127.0.0.2)
[ "$n" = "5" ] || fail "nginx: a client's X-Sluice-Cost: 3 reached sluice ($n of 6 allowed, not 5)"
echo "ok: nginx: a client's X-Sluice-Cost is stripped (5 of 6 allowed, as without it)"

if command -v caddy >/dev/null; then
  CADDY_FRONT=$(free_port)
  { printf '{\n\tadmin off\n\tauto_https off\n}\n'
    sed -e "s/127.0.0.1:9464/127.0.0.1:$SLUICE_HTTP/" -e "s/127.0.0.1:8080/127.0.0.1:$BACK/" \
        -e "s/^:8000 /:$CADDY_FRONT /" "$HERE/../../deploy/proxy/Caddyfile-sluice"
  } >"$TMP/Caddyfile"
  mkdir -p "$TMP/caddyhome"
  HOME=$TMP/caddyhome XDG_DATA_HOME=$TMP/caddyhome XDG_CONFIG_HOME=$TMP/caddyhome \
    caddy run --config "$TMP/Caddyfile" --adapter caddyfile >"$TMP/caddy.log" 2>&1 &
  CPID=$!
  for _ in $(seq 1 200); do
    curl -s -o /dev/null "http://127.0.0.1:$CADDY_FRONT/" 2>/dev/null && break
    sleep 0.05
  done
  # Caddy's key is {remote_host}, 127.0.0.1, which nginx's requests spent:
  # every hostile request must get sluice's refusal (403 here).
  passed=0
  for _ in $(seq 1 20); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "${hostile[@]}" "http://127.0.0.1:$CADDY_FRONT/api/items" || true)
    [ "$code" = "200" ] && passed=$((passed + 1))
    [ "$code" = "403" ] || { kill $CPID; cat "$TMP/caddy.log" >&2; fail "caddy: status $code, expected 403"; }
  done
  n=$(cost_probe "$CADDY_FRONT" 127.0.0.3)
  # An allowed request's answer carries the RateLimit fields too.
  out=$(curl -s -D "$TMP/hc" --interface 127.0.0.4 "http://127.0.0.1:$CADDY_FRONT/api/items" || true)
  [ "$out" = "upstream" ] || { kill $CPID; fail "caddy: a fresh client got '$out'"; }
  grep -qi '^RateLimit: "api";r=4' "$TMP/hc" \
    || { kill $CPID; fail "caddy: no RateLimit field on a 200: $(cat "$TMP/hc")"; }
  grep -qi '^RateLimit-Policy: "api";q=5' "$TMP/hc" \
    || { kill $CPID; fail "caddy: no RateLimit-Policy field on a 200"; }
  kill $CPID 2>/dev/null || true
  wait $CPID 2>/dev/null || true
  [ "$n" = "5" ] || fail "caddy: a client's X-Sluice-Cost: 3 reached sluice ($n of 6 allowed, not 5)"
  [ "$passed" = "0" ] || fail "caddy: $passed of 20 hostile requests passed an exhausted key"
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SLUICE_HTTP/v1/throttle?policy=api&key=victim")
  [ "$code" = "200" ] || fail "caddy: the victim's key was spent by a hostile X-Sluice-Key ($code)"
  echo "ok: Caddy forward_auth: 0 of 20 hostile requests passed (all 403); the victim's key untouched;"
  echo "    a client's X-Sluice-Cost is stripped (5 of 6 allowed); a 200 carries RateLimit"
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
# only X-Forwarded-For (which Traefik itself sets) reaches sluice
assert fa["authRequestHeaders"] == ["X-Forwarded-For"], fa
assert not fa.get("trustForwardHeader", False), fa
PY
  echo "ok: Traefik snippet loads"
fi

# sluiced stopped: the snippet fails closed, its fail-open variant passes.
kill "$SPID"
wait "$SPID" 2>/dev/null || true
SPID=""
code=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.5 "http://127.0.0.1:$FRONT/api/items")
[ "$code" = "500" ] || fail "nginx with sluice down: status $code, expected 500 (fail closed)"
code=$(curl -s -o "$TMP/open.body" -w '%{http_code}' --interface 127.0.0.5 "http://127.0.0.1:$FRONT_OPEN/api/items")
out=$(cat "$TMP/open.body")
[ "$code $out" = "200 upstream" ] || fail "nginx fail-open with sluice down: $code '$out', expected the upstream's 200"
echo "ok: nginx with sluice down: 500 (fail closed); the fail-open variant passes to the upstream"
