#!/usr/bin/env bash
# Installs, from Debian's packages, everything sluice needs to build, run and
# test.  Idempotent: does nothing when every package is already present.
# Needs root (or sudo) only when something is missing.
set -euo pipefail

# With --build-only, just what building the two programs needs (containers);
# with --run, that and redis-cli, to run a node and try it (quickstart.sh).
# Without either, everything the tests need too.
BUILD_PACKAGES=(
  build-essential cmake pkg-config
  libuv1-dev libmsgpack-dev libsodium-dev libinih-dev
  libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev libhttp-parser-dev
)
TEST_PACKAGES=(
  libcmocka-dev
  redis-server redis-tools python3 python3-redis python3-yaml
  clang clang-format clang-tidy cppcheck libclang-rt-14-dev
  valgrind gnuplot-nox iproute2 procps faketime
  python3-grpcio python3-grpc-tools nghttp2-client nginx-light caddy php-cli php-redis
  libguava-java default-jdk-headless
)
RUN_PACKAGES=(redis-tools)
BUILD_ONLY=0
case "${1:-}" in
  --build-only) BUILD_ONLY=1; PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  --run) BUILD_ONLY=1; PACKAGES=("${BUILD_PACKAGES[@]}" "${RUN_PACKAGES[@]}") ;;
  "") PACKAGES=("${BUILD_PACKAGES[@]}" "${RUN_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *) echo "usage: $0 [--build-only | --run]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js (for the ioredis client test) may come from elsewhere than Debian;
# Debian's packages are used only when no node is on PATH.
if [ $BUILD_ONLY -eq 0 ] && ! command -v node >/dev/null 2>&1; then
  for p in nodejs npm; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
