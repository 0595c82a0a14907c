#!/bin/bash
# Builds everything and runs every gate CI holds a change to (docs/testing.md):
#   normal   deploy/install-deps.sh, build in build/, the whole ctest suite
#   format   tests/check-format.sh (clang-format, changes nothing)
#   static   tests/check-static.sh (cppcheck)
#   asan     clang ASan+UBSan build in build-asan/, whole suite; any report
#            by any process, daemons included, fails the gate
#   tsan     clang TSan build in build-tsan/, suite (TETHER_TSAN_TESTS)
#   fuzz     clang libFuzzer build in build-fuzz/, each target for a while
# Every gate runs even when an earlier one failed, a summary table follows,
# and the exit status is non-zero when any gate failed.
# Usage: tests/run.sh [--quick] [--only gate[,gate...]]
#   --quick  the normal gate only
# The sanitizer gates run the failover suite's random kills with 2 seeds
# instead of 5 (TETHER_FAILOVER_SEEDS; the normal gate runs all 5): the
# seeds differ in which worker dies when, which the sanitizers do not need
# five times over, and on a slow 2-core machine each costs 20 s under TSan.
# Environment: TETHER_FUZZ_SECONDS (per target; default min(60, 100/targets)),
#   TETHER_TSAN_TESTS ("all", the default, or a ctest label such as threads),
#   JOBS (parallel build and test jobs; default nproc).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
quick=0
only=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --only) only=${2:-}; shift ;;
    *) echo "usage: tests/run.sh [--quick] [--only gate[,gate...]]" >&2; exit 2 ;;
    esac
    shift
done
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
gates=(normal format static asan tsan fuzz)
[ "$quick" = 1 ] && gates=(normal)
[ -n "$only" ] && IFS=, read -r -a gates <<<"$only"

deploy/install-deps.sh || { echo "run.sh: deploy/install-deps.sh failed" >&2; exit 1; }

build() { # build DIR [cmake args...]; BUILD_TARGET limits what is built
    local dir=$1; shift
    mkdir -p "$dir"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir/configure.log" 2>&1 ||
        { cat "$dir/configure.log"; return 1; }
    cmake --build "$dir" -j "$jobs" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
}

# Sanitizer reports go to files (log_path, one per process) instead of
# stderr, and the process aborts. A daemon started by an integration test may
# die of a report while the test only sees a closed socket, so the gate also
# fails on any report file it finds, and prints them.
check_reports() { # DIR
    local f found=0
    for f in "$1"/*; do
        [ -e "$f" ] || continue
        found=1
        echo "---- sanitizer report $f"
        head -n 80 "$f"
    done
    [ "$found" = 0 ] || { echo "run.sh: sanitizer reports in $1"; return 1; }
}

gate_normal() {
    build build && (cd build && ctest --output-on-failure -j "$jobs")
}

gate_format() { tests/check-format.sh; }

gate_static() { BUILD_DIR=build tests/check-static.sh; }

gate_asan() {
    local dir=build-asan logs="$top/build-asan/sanitizer-reports"
    build "$dir" -DCMAKE_C_COMPILER=clang -DTETHER_SANITIZE=address,undefined \
        -DTETHER_WITH_CUDA=OFF || return 1
    rm -rf "$logs" && mkdir -p "$logs"
    local rc=0
    TETHER_FAILOVER_SEEDS=${TETHER_FAILOVER_SEEDS:-1,2} \
        ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1:log_path=$logs/report" \
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:abort_on_error=1:log_path=$logs/report" \
        ctest --test-dir "$dir" --output-on-failure -j "$jobs" || rc=1
    check_reports "$logs" || rc=1
    return $rc
}

gate_tsan() {
    local dir=build-tsan logs="$top/build-tsan/sanitizer-reports" sel=()
    build "$dir" -DCMAKE_C_COMPILER=clang -DTETHER_SANITIZE=thread -DTETHER_WITH_CUDA=OFF ||
        return 1
    rm -rf "$logs" && mkdir -p "$logs"
    [ "${TETHER_TSAN_TESTS:-all}" != all ] && sel=(-L "$TETHER_TSAN_TESTS")
    local rc=0
    TETHER_FAILOVER_SEEDS=${TETHER_FAILOVER_SEEDS:-1,2} \
        TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$top/tests/sanitizers/tsan.supp:log_path=$logs/tsan" \
        ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${sel[@]}" || rc=1
    check_reports "$logs" || rc=1
    return $rc
}

# One libFuzzer target for a bounded time over its generated seeds and its
# committed regression corpus; new interesting inputs go to the (ignored)
# working corpus, a crashing input to build-fuzz/artifacts/<target>/.
fuzz_one() { # TARGET SECONDS
    local t=$1 secs=$2 bin=build-fuzz/tests/fuzz
    local seeds=build-fuzz/fuzz-seeds/$t work=tests/fuzz/corpus-work/$t
    local art=build-fuzz/artifacts/$t log=build-fuzz/fuzz-$t.log dirs=()
    rm -rf "$seeds" "$art" && mkdir -p "$seeds" "$work" "$art"
    "$bin/fuzz_${t}_replay" --write-seeds "$seeds" >/dev/null || return 1
    dirs=("$work" "$seeds")
    [ -d "tests/fuzz/corpus/$t" ] && dirs+=("tests/fuzz/corpus/$t")
    local rc=0 t0
    t0=$(date +%s)
    "$bin/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$art/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    echo "fuzz $t: ${execs:-?} executions in $(($(date +%s) - t0)) s (limit $secs s), exit $rc"
    if [ "$rc" != 0 ] || [ -n "$(ls -A "$art")" ]; then
        grep -v -E '^(#[0-9]+|INFO:)' "$log" | tail -n 60
        echo "fuzz $t: FAILED; reproduce: $bin/fuzz_$t $art/<file>;" \
            "keep the input in tests/fuzz/corpus/$t/ once fixed"
        return 1
    fi
}

gate_fuzz() {
    BUILD_TARGET=fuzz_all build build-fuzz -DCMAKE_C_COMPILER=clang -DTETHER_FUZZ=ON \
        -DTETHER_WITH_CUDA=OFF || return 1
    local targets=() t rc=0
    mapfile -t targets <build-fuzz/tests/fuzz/fuzz_targets.txt
    [ ${#targets[@]} -gt 0 ] || { echo "run.sh: no fuzz targets"; return 1; }
    local secs=${TETHER_FUZZ_SECONDS:-}
    if [ -z "$secs" ]; then
        secs=$((100 / ${#targets[@]}))
        [ "$secs" -gt 60 ] && secs=60
    fi
    for t in "${targets[@]}"; do
        fuzz_one "$t" "$secs" || rc=1
    done
    return $rc
}

results=()
failed=0
for g in "${gates[@]}"; do
    if ! declare -F "gate_$g" >/dev/null; then
        echo "run.sh: unknown gate '$g' (gates: normal format static asan tsan fuzz)" >&2
        exit 2
    fi
    echo "==== gate $g"
    start=$(date +%s)
    if "gate_$g"; then res=pass; else res=FAIL; failed=1; fi
    secs=$(($(date +%s) - start))
    echo "==== gate $g: $res ($secs s)"
    results+=("$(printf '%-8s %-5s %6s' "$g" "$res" "$secs")")
done
echo
echo "gate     result seconds"
printf '%s\n' "${results[@]}"
exit $failed
