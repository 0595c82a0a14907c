#!/bin/bash
# Device check: the GPU tests and a short benchmark in one run, on a machine
# with a GPU and CUDA but possibly none of the Debian libraries tether links
# (ZeroMQ, protobuf-c, libuv, OpenBLAS, CUnit...). Give it a build made
# elsewhere (--build) and a folder of those shared libraries (--libs, e.g.
# made by tests/gpu/pack-device.sh BUILD DEST with the programs themselves);
# without --build it configures and builds build-device/ here (needs the
# -dev packages). NCCL, cuBLAS and the CUDA runtime come from the machine:
# /usr/local/cuda and, when present, the pip "nvidia" wheels next to
# PyTorch. Prints a table at the end; exit status 1 when anything failed
# (skips are not failures, but the table shows them as SKIP).
# TETHER_FMNIST names the data folder (default: Debian's package);
# TETHER_CHECK_TIMEOUT bounds each check in seconds (default 180: a hung
# check must leave time for the others in a short device session), and
# TETHER_CHECK_BUDGET the whole run (default 540: one call to a device
# machine may last 600 s, and the table must come out before that). A
# check gets what is left of the budget when that is less than its own
# limit; once less than 10 s is left the remaining checks are not run,
# and the table says so (counted as failures: nothing was checked).
# Each check's whole log is copied into $OUT, when set, as soon as it ends.
# Usage: tests/gpu/device-check.sh [--build DIR] [--libs DIR] [--steps N]
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build="" libs="" steps=200
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --libs) libs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--libs DIR] [--steps N]" >&2; exit 2 ;;
    esac
done
if [ -z "$build" ]; then
    build=$top/build-device
    cmake -S "$top" -B "$build" -DTETHER_WITH_CUDA=ON >/dev/null &&
        cmake --build "$build" -j"$(nproc)" >/dev/null || { echo "build failed" >&2; exit 1; }
fi
build=$(cd "$build" && pwd)

# Shared libraries: the given folder, the CUDA toolkit, PyTorch's wheels.
paths=${libs:+$(cd "$libs" && pwd)}
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && paths=$paths:$d
done
wheels=$(python3 - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
    root = os.path.dirname(list(nvidia.__path__)[0])
    print(":".join(sorted({os.path.dirname(p) for p in
                           glob.glob(os.path.join(root, "nvidia", "*", "lib", "*.so*"))})))
except Exception:
    pass
PY
)
[ -n "$wheels" ] && paths=$paths:$wheels
export LD_LIBRARY_PATH=${paths#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TETHER_BUILD_DIR=$build
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader

rows=() fails=0
budget=${TETHER_CHECK_BUDGET:-540} began=$(date +%s)
record() { # name rc seconds log
    local st=FAIL note
    [ "$2" -eq 0 ] && st=PASS
    [ "$2" -eq 77 ] && st=SKIP
    [ "$2" -eq 124 ] || [ "$2" -eq 137 ] && st=TIME
    [ "$st" = FAIL ] || [ "$st" = TIME ] && fails=$((fails + 1))
    note=$(grep -E '^(SKIPPED|FAILED|PASSED|done:)|FAIL' "$4" | head -1 | cut -c1-70)
    [ "$st" = TIME ] && note="killed after its limit of $5 s; ${note:-no verdict}"
    rows+=("$(printf '| %-22s | %-4s | %6.1f | %s' "$1" "$st" "$3" "$note")")
}
run() { # name command...
    local name=$1; shift
    local log=$build/device-check-$name.log t0 rc
    local limit=${TETHER_CHECK_TIMEOUT:-180} left=$((budget - ($(date +%s) - began) - 15))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 10 ]; then
        fails=$((fails + 1))
        rows+=("$(printf '| %-22s | %-4s | %6.1f | %s' "$name" "LATE" 0 \
            "not run: the run's budget of $budget s was spent")")
        return
    fi
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "$@" >"$log" 2>&1
    rc=$?
    echo "== $name (exit $rc)"; tail -n 25 "$log"
    record "$name" $rc "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b - a}')" "$log" \
        "$limit"
    [ -n "${OUT:-}" ] && [ -d "$OUT" ] && cp "$log" "$OUT"/ 2>/dev/null
}

# rows[0] is gpu_cuda_smoke's: the trainer runs below need a GPU.
for t in gpu_cuda_smoke gpu_mlp_cuda gpu_trainer_cuda gpu_nccl_one_rank gpu_watchdog; do
    run "$t" "$build/tests/gpu/$t"
done
run gpu_two_workers python3 -u "$top/tests/gpu/gpu_two_workers.py"
# Two checks in one: the nccl+ps row, then the id relay to a second rank
# (its NCCL init may take up to 60 s to give up where it goes wrong).
TETHER_CHECK_TIMEOUT=${TETHER_CHECK_TIMEOUT:-240} \
    run gpu_nccl_fallback python3 -u "$top/tests/gpu/gpu_nccl_fallback.py"
# NCCL with two and three ranks on this one GPU (each its own host for
# NCCL): training, a kill (a new communicator) and a drain (a shrink).
TETHER_CHECK_TIMEOUT=${TETHER_CHECK_TIMEOUT:-240} \
    run gpu_nccl_ranks python3 -u "$top/tests/gpu/gpu_nccl_ranks.py"
run unit_nccl_watchdog "$build/tests/unit/test_nccl_watchdog"
run bench_gpu_train "$build/bench/bench_gpu_train" --steps "$steps"
run bench_gpu_torch python3 "$top/bench/bench_gpu_train.py" --steps "$steps"
# The whole trainer (data, staging, evaluation) on the GPU and, beside it,
# on this machine's CPUs: one worker, 3 epochs of whatever data is given.
data=${TETHER_FMNIST:-/usr/share/datasets/fashion-mnist}
if [ -f "$data/train-images-idx3-ubyte.gz" ] && [[ ${rows[0]} == *"| PASS |"* ]]; then
    for dev in cuda cpu; do
        run "train_$dev" "$build/worker/train/tether-train" --backend local --device "$dev" \
            --data "$data" --epochs 3 --log-every 0
    done
    run train_cuda_tf32 "$build/worker/train/tether-train" --backend local --device cuda --tf32 \
        --data "$data" --epochs 3 --log-every 0
fi

echo
echo "== benchmark (batch 256; ms per training step, examples/s)"
grep -h '^|' "$build/device-check-bench_gpu_train.log" "$build/device-check-bench_gpu_torch.log" \
    2>/dev/null
for f in "$build"/device-check-train_*.log; do
    [ -f "$f" ] && echo "$(basename "$f" .log | sed 's/device-check-//'): $(grep -h '^done:' "$f")"
done
echo
echo "== CUDA vs CPU arithmetic (docs/gpu.md: where the drift comes from)"
grep -hE ' products: |free-running|forced, |drift:|relative difference after' \
    "$build"/device-check-gpu_mlp_cuda.log "$build"/device-check-gpu_trainer_cuda.log \
    "$build"/device-check-gpu_two_workers.log 2>/dev/null
echo
echo "== device steps (docs/gpu.md: layers reduced during backward)"
grep -hE 'part\(s\)' "$build"/device-check-gpu_trainer_cuda.log \
    "$build"/device-check-gpu_two_workers.log 2>/dev/null
echo
echo "== NCCL with two and three ranks on one GPU (docs/gpu.md: shrink)"
grep -hE '^  ' "$build"/device-check-gpu_nccl_ranks.log 2>/dev/null
echo
echo "| check                  | st   |      s | note"
echo "|------------------------|------|--------|-----"
printf '%s\n' "${rows[@]}"
echo "device-check: $fails failed or not run, in $(($(date +%s) - began)) s of a $budget s budget"
[ $fails -eq 0 ]
