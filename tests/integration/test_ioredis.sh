#!/usr/bin/env bash
# Node's ioredis, unmodified, against sluiced over the Unix socket: connect
# (ioredis runs its INFO ready check), CL.THROTTLE, a pipeline, error replies.
# ioredis is installed with npm into a cache under the build tree if missing;
# the test prints SKIP and exits 0 when npm cannot install it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SLUICE_BIN=${SLUICE_BIN:-$HERE/../../build/bin}
CACHE=${SLUICE_NPM_CACHE:-$SLUICE_BIN/../npm-cache}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node/npm not installed"
  exit 0
fi
mkdir -p "$CACHE"
if [ ! -d "$CACHE/node_modules/ioredis" ]; then
  if ! timeout 300 npm install --prefix "$CACHE" --no-audit --no-fund ioredis \
    >"$CACHE/npm.log" 2>&1; then
    # The client could not be installed (no registry, a proxy, a broken
    # npm): nothing about sluice is known, so this is a skip, not a failure.
    tail -5 "$CACHE/npm.log" >&2
    echo "SKIP: npm install ioredis failed (the log is above)"
    exit 0
  fi
fi

TMP=$(mktemp -d /tmp/sluice-ioredis.XXXXXX)
PID=""
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
SOCK=$TMP/sluice.sock
"$SLUICE_BIN/sluiced" --socket "$SOCK" >"$TMP/log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
  "$SLUICE_BIN/sluicectl" -s "$SOCK" ping >/dev/null 2>&1 && break
  sleep 0.05
done
"$SLUICE_BIN/sluicectl" -s "$SOCK" ping >/dev/null

cat >"$TMP/t.js" <<'JS'
const assert = require("assert");
const Redis = require("ioredis");
(async () => {
  const r = new Redis({ path: process.env.SOCK, maxRetriesPerRequest: 1, enableOfflineQueue: true });
  assert.strictEqual(await r.ping(), "PONG");
  assert.deepStrictEqual(await r.call("CL.THROTTLE", "user123", 15, 30, 60), [0, 16, 15, -1, 2]);
  const p = r.pipeline();
  for (let i = 0; i < 50; i++) p.call("CL.THROTTLE", "io", 9, 1, 3600);
  const res = await p.exec();
  assert.strictEqual(res.length, 50);
  res.forEach(([err, v], i) => {
    assert.strictEqual(err, null);
    assert.strictEqual(v[0], i < 10 ? 0 : 1, "item " + i);
  });
  await assert.rejects(r.call("CL.THROTTLE", "io", "x", 1, 1), /Couldn't parse as integer: x/);
  await assert.rejects(r.call("NOPE"), /unknown command 'NOPE'/);
  assert.strictEqual(await r.echo("still here"), "still here");
  // multi(): MULTI ... EXEC, the replies of the queued commands
  const tx = await r.multi().call("CL.THROTTLE", "io-tx", 1, 1, 3600).call("CL.THROTTLE", "io-tx", 1, 1, 3600)
    .call("CL.THROTTLE", "io-tx", 1, 1, 3600).exec();
  assert.deepStrictEqual(tx.map(([err, v]) => [err, v[0]]), [[null, 0], [null, 0], [null, 1]]);
  await r.quit();
  console.log("ioredis: ok");
})().catch((e) => { console.error(e); process.exit(1); });
JS
SOCK=$SOCK NODE_PATH=$CACHE/node_modules timeout 60 node "$TMP/t.js"

kill -TERM "$PID"
status=0
wait "$PID" || status=$?
PID=""
if [ "$status" -ne 0 ]; then
  cat "$TMP/log" >&2
  echo "FAIL: sluiced exited with status $status" >&2
  exit 1
fi
if [ -e "$SOCK" ]; then
  echo "FAIL: socket left behind" >&2
  exit 1
fi
echo "PASS"
