#!/bin/bash
# Static-analysis gate: cppcheck over every C source and header the
# repository holds (tracked plus new, not-ignored files; never build trees),
# with warning, performance and portability checks, any finding an error.
# One configuration is checked (the -D list below, as the build defines it),
# which keeps the run to seconds; code under other #ifdef branches (CUDA)
# is not analysed. Types from the generated protobuf header come from the
# build tree when it exists (BUILD_DIR, default build/).
# False positives: `// cppcheck-suppress <id>` on the line, or an entry with
# a reason in .cppcheck-suppressions.
# Usage: tests/check-static.sh [FILE...]
# Exit status: 0 clean, 1 findings, 2 cppcheck missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
if ! command -v cppcheck >/dev/null; then
    echo "check-static: cppcheck not found (deploy/install-deps.sh installs it)" >&2
    exit 2
fi
if [ $# -gt 0 ]; then
    files=("$@")
else
    mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.c' '*.h' |
        sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
fi
[ ${#files[@]} -eq 0 ] && { echo "check-static: no files"; exit 0; }

incs=()
while read -r d; do incs+=(-I "$d"); done < <(printf '%s\n' "${files[@]}" | xargs -n1 dirname | sort -u)
defs=(-D_GNU_SOURCE -D__linux__ -D__x86_64__)
gen=${BUILD_DIR:-build}/proto
if [ -f "$gen/tether.pb-c.h" ]; then
    incs+=(-I "$gen")
    # protobuf-c's own header stays out (system headers only slow cppcheck
    # down), so tell the generated header which runtime it compiles against.
    v=$(pkg-config --modversion libprotobuf-c 2>/dev/null || echo 1.4.1)
    IFS=. read -r ma mi pa <<<"$v"
    defs+=(-DPROTOBUF_C_VERSION_NUMBER=$((ma * 1000000 + mi * 1000 + ${pa:-0})))
fi
start=$(date +%s)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
cppcheck --error-exitcode=1 --enable=warning,performance,portability --std=c11 \
    --inline-suppr --suppressions-list=.cppcheck-suppressions --suppress=missingIncludeSystem \
    -j "$(nproc 2>/dev/null || echo 2)" --quiet --template=gcc \
    "${defs[@]}" "${incs[@]}" "${files[@]}" >"$out" 2>&1 || rc=$?
cat "$out"
n=$(grep -c ': \(warning\|error\|performance\|portability\|style\): ' "$out" || true)
echo "check-static: ${#files[@]} files, $n findings, $(($(date +%s) - start)) s"
[ "$rc" -eq 0 ] || exit 1
