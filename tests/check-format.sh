#!/bin/bash
# Format gate: every C/CUDA source the repository holds must already be
# formatted by clang-format with the repo's .clang-format; the check changes
# nothing. Checks tracked files plus new, not-ignored ones (so build trees and
# generated code are never looked at). Fix with: clang-format -i FILE...
# Usage: tests/check-format.sh [FILE...]   (default: the whole repository)
# Exit status: 0 clean, 1 files need formatting, 2 clang-format missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
fmt=${CLANG_FORMAT:-clang-format}
if ! command -v "$fmt" >/dev/null; then
    echo "check-format: $fmt not found (deploy/install-deps.sh installs it)" >&2
    exit 2
fi
if [ $# -gt 0 ]; then
    files=("$@")
else
    mapfile -t files < <(git ls-files --cached --others --exclude-standard \
        '*.c' '*.h' '*.cu' '*.cuh' | sort -u)
fi
[ ${#files[@]} -eq 0 ] && { echo "check-format: no files"; exit 0; }
bad=()
for f in "${files[@]}"; do
    [ -f "$f" ] || continue # deleted in the working tree but not yet in git
    if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then
        bad+=("$f")
    fi
done
if [ ${#bad[@]} -gt 0 ]; then
    echo "check-format: ${#bad[@]} of ${#files[@]} files are not clang-formatted:"
    shown=0
    for f in "${bad[@]}"; do
        echo "  $f"
        # The first offending lines of the first few files say enough.
        if [ $shown -lt 5 ]; then
            "$fmt" --dry-run --Werror "$f" 2>&1 | head -6 | sed 's/^/    /'
            shown=$((shown + 1))
        fi
    done
    echo "check-format: fix with: clang-format -i ${bad[*]}"
    exit 1
fi
echo "check-format: ${#files[@]} files clean ($("$fmt" --version | sed 's/.*version //'))"
