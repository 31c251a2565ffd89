#!/usr/bin/env bash
# libsluice_client as another program uses it: `cmake --install` into a
# fresh prefix, a small C program built with nothing but
# `pkg-config --cflags --libs sluice-client` from that prefix, run against a
# real sluiced.  Fails if a header, the archive or the .pc file is missing,
# if the library needs a symbol it does not carry (libuv, libgossip, the
# daemon's code), or if the program's answers are wrong.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SLUICE_BIN=${SLUICE_BIN:-$HERE/../../build/bin}
BUILD=$(cd "$SLUICE_BIN/.." && pwd)
TMP=$(mktemp -d /tmp/sluice-client-install.XXXXXX)
PID=""
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

cmake --install "$BUILD" --prefix "$TMP/prefix" --component Unspecified >"$TMP/install.log"
PC=$(dirname "$(find "$TMP/prefix" -name sluice-client.pc)")
[ -n "$PC" ] || { echo "FAIL: no sluice-client.pc installed" >&2; exit 1; }

cat >"$TMP/prog.c" <<'C'
#include <stdio.h>
#include <sluice/client.h>
#include <sluice/error.h>

int main(int argc, char **argv)
{
    struct sluice_client *c;
    int rc = sluice_client_connect(argv[1], &c);
    if (rc < 0) {
        fprintf(stderr, "connect: %s\n", sluice_strerror(rc));
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        const char *cmd[] = {"CL.THROTTLE", "install-test", "1", "1", "3600"};
        struct sluice_reply *r;
        rc = sluice_client_command(c, 5, cmd, NULL, &r);
        if (rc < 0 || r->type != SLUICE_REPLY_ARRAY || r->nelem != 5) {
            fprintf(stderr, "throttle: %s\n", rc < 0 ? sluice_strerror(rc) : "bad reply");
            return 1;
        }
        printf("%lld\n", (long long)r->elements[0]->integer);
        sluice_reply_free(r);
    }
    sluice_client_close(c);
    (void)argc;
    return 0;
}
C
# A sanitizer build's archive needs the sanitizer runtimes at link time.
SAN=""
if grep -q '^SLUICE_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  SAN="-fsanitize=address,undefined"
fi
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Werror $SAN -o "$TMP/prog" "$TMP/prog.c" \
  $(PKG_CONFIG_PATH="$PC" pkg-config --cflags --libs sluice-client)

SOCK=$TMP/sluice.sock
"$SLUICE_BIN/sluiced" --socket "$SOCK" >"$TMP/log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do
  "$SLUICE_BIN/sluicectl" -s "$SOCK" ping >/dev/null 2>&1 && break
  sleep 0.05
done
# burst 1: capacity 2, then refused for an hour.
got=$("$TMP/prog" "$SOCK" | tr '\n' ' ')
if [ "$got" != "0 0 1 " ]; then
  echo "FAIL: expected '0 0 1 ', got '$got'" >&2
  exit 1
fi
echo "ok: installed libsluice_client built with pkg-config answers $got"
