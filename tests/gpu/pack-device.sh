#!/bin/bash
# Packs what tests/gpu/device-check.sh needs on a GPU machine that has CUDA
# but none of the Debian libraries: the programs it runs (same layout as
# the build tree), the shared libraries they load from this machine (minus
# the C library and CUDA/NCCL, which the GPU machine brings) and a
# Fashion-MNIST subset (12,800 training images, the full test set) small
# enough to travel. On the GPU machine:
#   TETHER_FMNIST=DEST/fmnist tests/gpu/device-check.sh --build DEST/build --libs DEST/libs
# Usage: tests/gpu/pack-device.sh BUILD DEST [FASHION_MNIST_DIR]
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BUILD DEST [FASHION_MNIST_DIR]" >&2; exit 2; }
build=$1 dest=$2 data=${3:-/usr/share/datasets/fashion-mnist}
progs="tests/gpu/gpu_cuda_smoke tests/gpu/gpu_mlp_cuda tests/gpu/gpu_trainer_cuda
tests/gpu/gpu_nccl_one_rank tests/gpu/gpu_watchdog tests/gpu/nccl_ps_check tests/gpu/nccl_relay_check
tests/unit/test_nccl_watchdog
bench/bench_gpu_train worker/train/tether-train tools/tether-launch tools/tetherctl
server/shard/tether-shard server/coordinator/tether-coordinator"
rm -rf "$dest/build" "$dest/libs"
mkdir -p "$dest/libs" "$dest/fmnist"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda\.so|libnccl|libcublas|libcudart|libnvidia|libstdc\+\+|libgcc_s)'
for p in $progs; do
    [ -x "$build/$p" ] || { echo "pack-device: $build/$p is not built" >&2; exit 1; }
    mkdir -p "$dest/build/$(dirname "$p")"
    cp "$build/$p" "$dest/build/$p"
    strip "$dest/build/$p" 2>/dev/null || true
    ldd "$build/$p" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
        [[ $name =~ $skip ]] || cp -Lu "$path" "$dest/libs/$name"
    done
done
python3 - "$data" "$dest/fmnist" <<'PY'
import gzip, shutil, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], 12800
img = gzip.open(f"{src}/train-images-idx3-ubyte.gz").read()
magic, _, rows, cols = struct.unpack(">IIII", img[:16])
with gzip.open(f"{dst}/train-images-idx3-ubyte.gz", "wb") as f:
    f.write(struct.pack(">IIII", magic, n, rows, cols) + img[16:16 + n * rows * cols])
lab = gzip.open(f"{src}/train-labels-idx1-ubyte.gz").read()
with gzip.open(f"{dst}/train-labels-idx1-ubyte.gz", "wb") as f:
    f.write(struct.pack(">II", struct.unpack(">I", lab[:4])[0], n) + lab[8:8 + n])
for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
    shutil.copy(f"{src}/{name}", f"{dst}/{name}")
PY
du -sh "$dest"
