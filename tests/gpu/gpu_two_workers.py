#!/usr/bin/env python3
"""GPU job test: two tether-train workers sharing one GPU (--device cuda).

NCCL refuses two ranks on one device, so these use the ring and PS
backends with device staging (gradient sums go device -> host, the
collective runs on the host, the update runs on the device); one worker
on the NCCL backend keeps its gradients on the device. With the same
seed, the parameters after 50 steps match the single-process CPU run within
1e-4 relative (float32, different summation orders on the two devices), and
the single-process CUDA run matches it too. A worker whose local rank has
no GPU of its own is refused under the nccl backend. Exits 77 (skipped) without a
GPU, a CUDA build or the Fashion-MNIST data, and says why.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from tt_harness import BUILD, binary, program_skips, read_params, rel_diff, run_tests  # noqa: E402

DATA = os.environ.get("TETHER_FMNIST", "/usr/share/datasets/fashion-mnist")
ARGS = ["--lr", "0.05", "--log-every", "0", "--seed", "7",
        "--train-limit", "12800"]
TOL = 1e-4


def skip_reason():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        return f"no Fashion-MNIST under {DATA}"
    # A smoke test that fails (not skips) lets this one run, and fail.
    return program_skips(os.path.join(BUILD, "tests", "gpu", "gpu_cuda_smoke"))


def single(h, name, device, out, steps=50):
    p = h.spawn(name, [binary("tether-train"), "--backend", "local", "--device", device,
                       "--data", DATA, *ARGS, "--max-steps", str(steps), "--dump-params", out])
    assert p.wait(240) == 0, f"{name} failed"


def launch(h, name, backend, shards, out, workers=2, env=None):
    argv = [binary("tether-launch"), "--workers", str(workers), "--shards", str(shards), "--",
            "tether-train", "--data", DATA, "--device", "cuda", "--backend", backend, *ARGS,
            "--max-steps", "50", "--dump-params", out]
    p = h.spawn(name, argv, env=env)
    assert p.wait(300) == 0, f"{name}: tether-launch failed"


def diff(h, name, ref):
    return rel_diff(read_params(os.path.join(h.dir, name + ".bin")), ref)


def drift(h):
    """Where the single-process CUDA run parts from the CPU one: after how
    many steps, and how fast the difference grows."""
    for steps in (1, 5, 10, 25):
        paths = {}
        for dev in ("cpu", "cuda"):
            paths[dev] = os.path.join(h.dir, f"{dev}-{steps}.bin")
            single(h, f"{dev}-{steps}", dev, paths[dev], steps)
        d = rel_diff(read_params(paths["cuda"]), read_params(paths["cpu"]))
        print(f"  drift: after {steps:2d} steps the CUDA run differs from the CPU run by {d:.2e}")


def test_two_workers_share_one_gpu(h):
    ref_path = os.path.join(h.dir, "cpu.bin")
    single(h, "cpu", "cpu", ref_path)
    ref = read_params(ref_path)
    single(h, "cuda1", "cuda", os.path.join(h.dir, "cuda1.bin"))
    cuda1 = read_params(os.path.join(h.dir, "cuda1.bin"))
    runs = ["cuda1"]
    launch(h, "ring2", "ring", 0, os.path.join(h.dir, "ring2.bin"))
    runs.append("ring2")
    try:
        binary("tether-shard")
        launch(h, "ps2", "ps", 2, os.path.join(h.dir, "ps2.bin"))
        runs.append("ps2")
    except FileNotFoundError:
        print("  ps: this build has no tether-shard; ring only")
    # One rank on NCCL: the gradients stay on the device (NCCL refuses a
    # second rank on the same GPU).
    # the device-step lines checked below are INFO; tether-train logs WARN by default
    launch(h, "nccl1", "nccl", 0, os.path.join(h.dir, "nccl1.bin"), workers=1,
           env={"TETHER_LOG": "info"})
    runs.append("nccl1")
    bad = []
    logs = ""
    for ext in (".log", ".out"):
        with open(os.path.join(h.dir, "nccl1" + ext), errors="replace") as f:
            logs += f.read()
    if "gradients reduced in device memory" not in logs:
        bad.append("nccl1 did not keep the gradients on the device")
    # Bucket overlap: each layer's sums leave during backward.
    parts = re.search(r"(\d+) part\(s\) started during backward", logs)
    if parts is None or int(parts.group(1)) < 1:
        bad.append("nccl1 started no layer's reduction during backward")
    else:
        print(f"  nccl1: {parts.group(1)} layer part(s) reduced during backward")
    for name in runs:
        d, dc = diff(h, name, ref), diff(h, name, cuda1)
        print(f"  {name}: relative difference after 50 steps: {d:.2e} to the CPU run, "
              f"{dc:.2e} to the one-process CUDA run")
        if d >= TOL:
            bad.append(f"{name} differs from the CPU run by {d:.2e} (limit {TOL})")
    if bad:
        drift(h)
    assert not bad, "; ".join(bad)


def test_nccl_wants_a_gpu_per_worker(h):
    """--cuda-device auto on a host with fewer GPUs than workers: under
    the nccl backend the worker whose local rank has no GPU of its own is
    refused at start-up (exit 2, with what to do instead), before it joins
    anything; a device number the process does not see is refused too."""
    cases = [
        ("rank1023", {"TETHER_LOCAL_RANK": "1023"}, ["--backend", "nccl"],
         "local rank 1023 on a host where this process sees"),
        ("device1023", {}, ["--backend", "nccl", "--cuda-device", "1023"],
         "CUDA device 1023: this process sees"),
    ]
    for name, env, extra, want in cases:
        p = h.spawn(name, [binary("tether-train"), "--device", "cuda", "--data", DATA, *extra],
                    env={"TETHER_CUDA_DEVICE": None, "TETHER_COORDINATOR": None, **env})
        rc = p.wait(60)
        err = "\n".join(p.lines("log"))
        assert rc == 2 and want in err, f"{name}: exit {rc}: {err}"
        print(f"  {name}: exit 2: {err.strip().splitlines()[-1]}")


if __name__ == "__main__":
    why = skip_reason()
    if why is not None:
        print(f"SKIPPED: {why}")
        sys.exit(77)
    run_tests([test_two_workers_share_one_gpu, test_nccl_wants_a_gpu_per_worker])
