#!/usr/bin/env python3
"""GPU job test: two tether-train workers sharing one GPU (--device cuda).

NCCL refuses two ranks on one device, so these use the ring and PS
backends with device staging (gradient sums go device -> host, the
collective runs on the host, the update runs on the device). With the same
seed, the parameters after 50 steps match the single-process CPU run within
1e-4 relative (float32, different summation orders on the two devices), and
the single-process CUDA run matches it too. Exits 77 (skipped) without a
GPU, a CUDA build or the Fashion-MNIST data, and says why.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from tt_harness import BUILD, binary, read_params, rel_diff, run_tests  # noqa: E402

DATA = os.environ.get("TETHER_FMNIST", "/usr/share/datasets/fashion-mnist")
ARGS = ["--max-steps", "50", "--lr", "0.05", "--log-every", "0", "--seed", "7",
        "--train-limit", "12800"]
TOL = 1e-4


def skip_reason():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        return f"no Fashion-MNIST under {DATA}"
    smoke = os.path.join(BUILD, "tests", "gpu", "gpu_cuda_smoke")
    if not os.path.exists(smoke):
        return "gpu_cuda_smoke is not built"
    r = subprocess.run([smoke], capture_output=True, text=True)
    if r.returncode == 77:
        return r.stdout.strip().replace("SKIPPED: ", "")
    return None if r.returncode == 0 else f"CUDA smoke test failed: {r.stdout.strip()}"


def single(h, name, device, out):
    p = h.spawn(name, [binary("tether-train"), "--backend", "local", "--device", device,
                       "--data", DATA, *ARGS, "--dump-params", out])
    assert p.wait(240) == 0, f"{name} failed"


def launch(h, name, backend, shards, out):
    argv = [binary("tether-launch"), "--workers", "2", "--shards", str(shards), "--",
            "tether-train", "--data", DATA, "--device", "cuda", "--backend", backend, *ARGS,
            "--dump-params", out]
    p = h.spawn(name, argv)
    assert p.wait(300) == 0, f"{name}: tether-launch failed"


def compare(h, name, ref):
    d = rel_diff(read_params(os.path.join(h.dir, name + ".bin")), ref)
    print(f"  {name}: relative difference to the CPU run after 50 steps: {d:.2e}")
    assert d < TOL, f"{name}: parameters differ by {d:.2e} (limit {TOL})"


def test_two_workers_share_one_gpu(h):
    ref_path = os.path.join(h.dir, "cpu.bin")
    single(h, "cpu", "cpu", ref_path)
    ref = read_params(ref_path)
    single(h, "cuda1", "cuda", os.path.join(h.dir, "cuda1.bin"))
    compare(h, "cuda1", ref)
    launch(h, "ring2", "ring", 0, os.path.join(h.dir, "ring2.bin"))
    compare(h, "ring2", ref)
    try:
        binary("tether-shard")
    except FileNotFoundError:
        print("  ps: this build has no tether-shard; ring only")
        return
    launch(h, "ps2", "ps", 2, os.path.join(h.dir, "ps2.bin"))
    compare(h, "ps2", ref)


if __name__ == "__main__":
    why = skip_reason()
    if why is not None:
        print(f"SKIPPED: {why}")
        sys.exit(77)
    run_tests([test_two_workers_share_one_gpu])
