#!/usr/bin/env bash
# PHP's phpredis (Debian php-redis), unmodified, against sluiced over the
# Unix socket: multi() ... exec() with CL.THROTTLE and SL.* inside (answered
# as one transaction), discard() (nothing queued is run), and EXEC without
# MULTI refused as Redis refuses it.  Prints SKIP and exits 0 without php
# or its redis extension.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SLUICE_BIN=${SLUICE_BIN:-$HERE/../../build/bin}
if ! command -v php >/dev/null || ! php -m 2>/dev/null | grep -qx redis; then
  echo "SKIP: php with the redis extension (Debian php-cli php-redis) not installed"
  exit 0
fi
TMP=$(mktemp -d /tmp/sluice-php.XXXXXX)
PID=""
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
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
cat >"$TMP/t.php" <<'PHP'
<?php
function check($cond, $what) {
    if (!$cond) { fwrite(STDERR, "FAIL: $what\n"); exit(1); }
}
$r = new Redis();
$r->connect($argv[1]);
// multi(): the queued commands run as one and exec() answers their replies
$res = $r->multi()
    ->rawCommand('CL.THROTTLE', 'php:tx', 1, 1, 3600)
    ->rawCommand('CL.THROTTLE', 'php:tx', 1, 1, 3600)
    ->rawCommand('CL.THROTTLE', 'php:tx', 1, 1, 3600)
    ->rawCommand('SL.THROTTLE', 'php:sl', 'ALGO', 'gcra', 'RATE', 1, 60000)
    ->exec();
check(is_array($res) && count($res) === 4, "exec() answered " . json_encode($res));
check(array_column($res, 0) === [0, 0, 1, 0], "limited flags " . json_encode($res));
// discard(): nothing queued is run
$r->multi();
$r->rawCommand('CL.THROTTLE', 'php:d', 0, 1, 3600);
$r->discard();
$peek = $r->rawCommand('SL.PEEK', 'php:d', 'ALGO', 'gcra', 'RATE', 1, 3600000);
check($peek[2] === 1, "after discard() the key is untouched: " . json_encode($peek));
// EXEC without MULTI: an error reply, as from Redis
check($r->rawCommand('EXEC') === false, "EXEC without MULTI was accepted");
check(strpos($r->getLastError(), 'EXEC without MULTI') !== false, "error " . $r->getLastError());
echo "ok: phpredis multi/exec/discard: ", json_encode($res), "\n";
PHP
php "$TMP/t.php" "$SOCK"
