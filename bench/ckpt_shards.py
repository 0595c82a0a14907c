#!/usr/bin/env python3
"""ckpt_shards: the training stall of checkpoints with the update on the
shard servers (the shards write the state, rank 0 the trainer part and the
commit; docs/checkpoints.md "Stall"), measured with tether-train itself.

Each round runs, through tether-launch (W workers bound to their CPUs, S
shard servers), 784-2048-2048-10 (5.8 M parameters, 46.6 MB a checkpoint)
on --examples training examples: once with a checkpoint every --every steps
and once without any, for every build given, alternating. From rank 0's
summary it takes the worst and the median stall of one checkpoint (the time
its boundaries and the gate held the step loop, as % of the mean step), the
mean step and the training time; the table gives each run and the median
over the rounds, and the training time with checkpoints over the time
without (per round), which shows what the checkpoints cost the steps
outside the hook as well.

Usage: bench/ckpt_shards.py [--build build ...] [--rounds 5] [--workers 2]
       [--shards 2] [--every 10] [--examples 25600] [--dir /tmp/...]
Prints a Markdown table. Parameters do not depend on the checkpoints: the
test accuracy of every run is printed and must be the same.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
TRAIN = ["--backend", "ps", "--update", "shards", "--layers", "784,2048,2048,10", "--epochs", "1",
         "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--no-nesterov",
         "--weight-decay", "0", "--schedule", "const", "--warmup-steps", "0", "--threads", "1",
         "--log-every", "0"]
CKPT = re.compile(r"worker 0\] checkpoints: (\d+) committed, (\d+) aborted; worst stall of one "
                  r"([0-9.]+) ms \(([0-9.]+)% of a mean step of ([0-9.]+) ms\), median "
                  r"([0-9.]+) ms \(([0-9.]+)%\)")
DONE = re.compile(r"worker 0\] done: test accuracy ([0-9.]+).*\(training ([0-9.]+)s\)")


def run(build, args, every, root):
    argv = [os.path.join(build, "tools/tether-launch"), "--workers", str(args.workers),
            "--shards", str(args.shards), "--", "tether-train", *TRAIN,
            "--train-limit", str(args.examples)]
    if every:
        shutil.rmtree(root, ignore_errors=True)
        argv += ["--checkpoint-dir", root, "--checkpoint-every-steps", str(every)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    text = out.stdout + out.stderr
    done = DONE.search(text)
    if out.returncode != 0 or done is None:
        sys.stderr.write(text[-3000:])
        raise RuntimeError(f"run failed ({out.returncode}): {' '.join(argv)}")
    r = {"acc": float(done.group(1)), "train_s": float(done.group(2))}
    m = CKPT.search(text)
    if every and m is None:
        sys.stderr.write(text[-3000:])
        raise RuntimeError("no checkpoint summary from rank 0")
    if m:
        r.update(committed=int(m.group(1)), aborted=int(m.group(2)), worst=float(m.group(4)),
                 median=float(m.group(7)), step_ms=float(m.group(5)))
    return r


def fmt(vals, f="{:.1f}"):
    return ", ".join(f.format(v) for v in vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", nargs="+", default=[os.path.join(TOP, "build")])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--examples", type=int, default=25600)
    ap.add_argument("--dir", default=None, help="checkpoint root (default: a temporary one)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ckpt-shards-")
    root = args.dir or os.path.join(tmp, "ckpt")
    res = {b: {"ck": [], "none": []} for b in args.build}
    try:
        for rnd in range(args.rounds):
            for b in args.build:
                res[b]["ck"].append(run(b, args, args.every, root))
                res[b]["none"].append(run(b, args, 0, root))
                c, n = res[b]["ck"][-1], res[b]["none"][-1]
                print(f"round {rnd + 1} {b}: worst {c['worst']}% median {c['median']}% "
                      f"step {c['step_ms']} ms, {c['train_s']} s vs {n['train_s']} s without",
                      file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.workers} workers + {args.shards} shard servers, 784-2048-2048-10, "
          f"{args.examples} examples, a checkpoint every {args.every} steps, "
          f"{args.rounds} rounds (per-run values, then the median)\n")
    print("| build | worst stall of one checkpoint, % of a step | median stall, % | mean step, ms "
          "| training time with / without checkpoints | test accuracy |")
    print("|---|---|---|---|---|---|")
    for b in args.build:
        ck, none = res[b]["ck"], res[b]["none"]
        worst = [r["worst"] for r in ck]
        med = [r["median"] for r in ck]
        step = [r["step_ms"] for r in ck]
        ratio = [c["train_s"] / n["train_s"] for c, n in zip(ck, none)]
        accs = sorted({r["acc"] for r in ck + none})
        print(f"| {b} | {fmt(worst)} (**{statistics.median(worst):.1f}**) | {fmt(med)} "
              f"(**{statistics.median(med):.1f}**) | {fmt(step, '{:.0f}')} | {fmt(ratio, '{:.2f}')} "
              f"(**{statistics.median(ratio):.2f}**) | {fmt(accs, '{:.4f}')} |")
        bad = [r for r in ck if r["aborted"] or r["committed"] == 0]
        if bad:
            print(f"\n{b}: {len(bad)} run(s) aborted or committed no checkpoint")


if __name__ == "__main__":
    main()
