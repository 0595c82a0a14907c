#!/bin/bash
# Builds everything and runs every test: installs missing packages,
# configures, builds, and runs ctest. `--quick` stops after the normal build
# and suite; CI always runs everything (the sanitizer and fuzz gates too).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
quick=0
for a in "$@"; do
    case "$a" in
    --quick) quick=1 ;;
    *) echo "usage: tests/run.sh [--quick]" >&2; exit 2 ;;
    esac
done
jobs=$(nproc 2>/dev/null || echo 2)

deploy/install-deps.sh

build() { # build DIR [cmake args...]
    local dir=$1; shift
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
        { cat "$dir.configure.log"; return 1; }
    cmake --build "$dir" -j "$jobs"
}

mkdir -p build
start=$(date +%s)
build build
(cd build && ctest --output-on-failure -j "$jobs")
echo "gate normal: $(( $(date +%s) - start )) s"
[ "$quick" = 1 ] && exit 0
exit 0
