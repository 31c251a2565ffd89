#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder with libFuzzer, bounded in time.
#
#   bash tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Configures and builds the fuzz targets with clang, libFuzzer and
# ASan/UBSan into $SLUICE_FUZZ_BUILD (default: build-fuzz in the source
# tree), then runs the targets one after the other (all of them when none is
# named; a name may omit the "fuzz_" prefix), each for SECONDS_PER_TARGET
# seconds (default 60).  Seeds come from tests/fuzz/corpus/TARGET/ and are
# never written to: what the run learns goes to a scratch corpus,
# $SLUICE_FUZZ_OUT/TARGET (default: $SLUICE_FUZZ_BUILD/corpus), kept between
# runs so a later run starts where the last one stopped.
#
# Stops at the first crash, leak, sanitizer report, timeout or out-of-memory
# input, prints the reproducer's path and the command that replays it, and
# exits 1.  Exits 0 when every target ran its time clean, 2 on a usage or
# build error.
#
# Environment: SLUICE_FUZZ_BUILD, SLUICE_FUZZ_OUT (see above),
# SLUICE_FUZZ_TIMEOUT (seconds one input may take, default 10),
# SLUICE_FUZZ_RSS_MB (memory limit, default 2048), CC (default clang).
set -u

src=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-60}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
    echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
fi
[ $# -gt 0 ] && shift
build=${SLUICE_FUZZ_BUILD:-$src/build-fuzz}
out=${SLUICE_FUZZ_OUT:-$build/corpus}
timeout=${SLUICE_FUZZ_TIMEOUT:-10}
rss=${SLUICE_FUZZ_RSS_MB:-2048}

all=()
for f in "$src"/tests/fuzz/fuzz_*.c; do
    all+=("$(basename "$f" .c)")
done
targets=()
if [ $# -eq 0 ]; then
    targets=("${all[@]}")
else
    for t in "$@"; do
        t=fuzz_${t#fuzz_}
        if [ ! -f "$src/tests/fuzz/$t.c" ]; then
            echo "$0: no fuzz target $t (have: ${all[*]})" >&2
            exit 2
        fi
        targets+=("$t")
    done
fi

echo "== building ${targets[*]} in $build"
CC=${CC:-clang} cmake -S "$src" -B "$build" -DSLUICE_LIBFUZZER=ON -DSLUICE_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.configure.log" 2>&1 || {
    cat "$build.configure.log" >&2
    exit 2
}
cmake --build "$build" -j2 --target "${targets[@]}" || exit 2

# A leak or UBSan report must stop the run like a crash does.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

for t in "${targets[@]}"; do
    bin=$build/tests/$t
    corpus=$out/$t
    art=$build/artifacts/$t
    mkdir -p "$corpus" "$art"
    seeds=()
    [ -d "$src/tests/fuzz/corpus/$t" ] && seeds=("$src/tests/fuzz/corpus/$t")
    log=$build/$t.log
    echo "== $t: ${secs}s (log $log)"
    "$bin" -max_total_time="$secs" -timeout="$timeout" -rss_limit_mb="$rss" \
        -print_final_stats=1 -artifact_prefix="$art/" "$corpus" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    # The last status line: executions, coverage, corpus size.
    grep -E '^#[0-9]+' "$log" | tail -n 1
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$log"
    if [ $rc -ne 0 ]; then
        repro=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -n 1 | sed 's/.* to //')
        echo "== $t FAILED (exit $rc); the report:"
        grep -E -m 20 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x|deadly signal|timeout' "$log"
        if [ -n "$repro" ]; then
            echo "== reproducer: $repro"
            echo "== replay:     $bin $repro"
        else
            echo "== no reproducer written; see $log"
        fi
        exit 1
    fi
done
echo "== all clean: ${targets[*]}"
