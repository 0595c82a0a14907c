#!/usr/bin/env python3
"""bench_train: tether-train vs PyTorch DDP (gloo) on the identical model,
data, global batch, optimiser and epochs, measured in the same run.

For each model (784-256-256-10 for 5 epochs, 784-2048-2048-10 for 1 epoch)
and world size W in 1, 2, 4: tether's training examples/s (W=1 is the
single-process backend, W>1 runs through tether-launch on the ring), time
per epoch and final test accuracy; beside it PyTorch DDP with the peers'
script (shared/peers/ddp_mlp_fmnist.py: 1 torch thread and 1 OpenBLAS
thread per rank), when Debian's python3-torch is installed. Both use SGD
lr 0.1 momentum 0.9, global batch 256, no schedule, no weight decay.

tether-launch binds each worker to its share of the CPUs (its default,
--bind cores); --unbound adds, for W > 1, a row of tether with --bind none
(placement left to the kernel, as the DDP ranks are), run in the same
rounds, to show what the binding is worth.

Usage: bench/train/bench_train.py [--build build] [--quick] [--repeat N] [--unbound]
Prints a Markdown table; medians over --repeat runs (default 1).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PEERS = os.path.join(os.path.dirname(TOP), "shared", "peers", "ddp_mlp_fmnist.py")
TORCH_PY = "/usr/bin/python3"
SGD = ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--no-nesterov",
       "--weight-decay", "0", "--schedule", "const", "--warmup-steps", "0", "--batch", "256",
       "--threads", "1", "--log-every", "0"]
DONE = re.compile(r"done: test accuracy ([0-9.]+).* train ([0-9.]+) examples/s .*"
                  r"training ([0-9.]+)s")


def run_tether(build, hidden, epochs, world, bind="cores"):
    layers = ",".join(["784", *map(str, hidden), "10"])
    args = ["--layers", layers, "--epochs", str(epochs), *SGD]
    if world == 1:
        argv = [os.path.join(build, "worker/train/tether-train"), "--backend", "local", *args]
    else:
        argv = [os.path.join(build, "tools/tether-launch"), "--workers", str(world), "--shards",
                "0", "--bind", bind, "--", "tether-train", "--backend", "ring", *args]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    m = DONE.search(out.stdout)
    if out.returncode != 0 or m is None:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise RuntimeError(f"tether run failed: {' '.join(argv)}")
    acc, exs, train_s = float(m.group(1)), float(m.group(2)), float(m.group(3))
    return {"examples_per_s": exs, "s_per_epoch": train_s / epochs, "test_acc": acc}


def have_torch():
    try:
        return subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True,
                              timeout=120).returncode == 0 and os.path.exists(PEERS)
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_ddp(hidden, epochs, world):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        argv = [TORCH_PY, PEERS, "--world-sizes", str(world), "--hidden", *map(str, hidden),
                "--epochs", str(epochs), "--json", f.name]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
            raise RuntimeError("DDP run failed")
        r = json.loads(open(f.name).read().splitlines()[-1])
    return {"examples_per_s": r["examples_per_s"], "s_per_epoch": r["mean_epoch_time_s"],
            "test_acc": r["test_acc"]}


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--quick", action="store_true", help="small model only, W = 1 and 2")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--unbound", action="store_true",
                    help="also run tether with --bind none for W > 1")
    a = ap.parse_args()
    torch_ok = have_torch()
    models = [((256, 256), 5)] if a.quick else [((256, 256), 5), ((2048, 2048), 1)]
    worlds = (1, 2) if a.quick else (1, 2, 4)
    print("| model | W | tether ex/s | DDP ex/s | tether/DDP | tether s/epoch | DDP s/epoch "
          "| tether acc | DDP acc |")
    print("|---|---|---|---|---|---|---|---|---|")
    for hidden, epochs in models:
        base = None
        for w in worlds:
            # interleave tether and DDP so drifting machine load hits both
            t_runs, d_runs, u_runs = [], [], []
            for _ in range(a.repeat):
                t_runs.append(run_tether(a.build, hidden, epochs, w))
                if a.unbound and w > 1:
                    u_runs.append(run_tether(a.build, hidden, epochs, w, bind="none"))
                if torch_ok:
                    d_runs.append(run_ddp(hidden, epochs, w))
            t = {k: median_of(t_runs, k) for k in t_runs[0]}
            d = {k: median_of(d_runs, k) for k in d_runs[0]} if d_runs else None
            base = base or t["examples_per_s"]
            name = "784-" + "-".join(map(str, hidden)) + f"-10, {epochs} ep"
            dd = (f"{d['examples_per_s']:.0f} | {t['examples_per_s'] / d['examples_per_s']:.2f}x"
                  if d else "n/a | n/a")
            print(f"| {name} | {w} | {t['examples_per_s']:.0f} | {dd} | "
                  f"{t['s_per_epoch']:.2f} | {d['s_per_epoch']:.2f} | " if d else
                  f"| {name} | {w} | {t['examples_per_s']:.0f} | {dd} | {t['s_per_epoch']:.2f} "
                  f"| n/a | ", end="")
            print(f"{t['test_acc']:.4f} | {d['test_acc']:.4f} |" if d else
                  f"{t['test_acc']:.4f} | n/a |")
            if w > 1:
                print(f"|  | W={w} vs tether W=1 | {t['examples_per_s'] / base:.2f}x |  |  |  "
                      "|  |  |  |")
            if u_runs:
                u = median_of(u_runs, "examples_per_s")
                vs = f"{u / d['examples_per_s']:.2f}x" if d else "n/a"
                print(f"|  | W={w} unbound (--bind none) | {u:.0f} |  | {vs} | "
                      f"{median_of(u_runs, 's_per_epoch'):.2f} |  | "
                      f"{median_of(u_runs, 'test_acc'):.4f} |  |")
            sys.stdout.flush()
    if not torch_ok:
        print("\nPyTorch (Debian python3-torch) not installed: DDP columns not measured.")
    print("\nTargets: W=1 >= PyTorch; W=2 and W=4 >= 2x DDP; tether W=2 >= 1.6x tether W=1.")


if __name__ == "__main__":
    main()
