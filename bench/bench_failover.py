#!/usr/bin/env python3
"""bench_failover: how long a tether-train job stalls when a worker is
killed with SIGKILL, split into its phases, from the processes' own logs.

Each repetition starts a 4-worker job through tether-launch (no restart,
--min-workers 3), on the ring backend without shard servers, on the ring
backend with 2 shards (the new generation's first 8 steps then run on the
shards: the coordinator's PS fallback, docs/failover.md) and on the PS
backend with 2 shards, kills worker 1 after a few steps and reads:

  detection  kill -> the first survivor's collective reports the peer gone
             (a ring socket monitor: the ring's own, or the PS backend's
             plain ring while its call waits on the shards; the WARN line)
  regroup    detection -> the last survivor acknowledged the new generation
             (coordinator confirms, generation formed, workers told)
  agreement  state agreement in the new generation (ring rebuild, the
             survey collective and, when needed, the state broadcast)
  redo       agreement -> the first step after it completed (the step that
             failed, re-done on the new world)
  total      kill -> first step after the regroup completed (slowest rank)

With the fallback, the redo column is a step on the shards. Then steps/s
of the ring and of the PS backend (2 shards) for the same job, measured in
separate fault-free runs.

Usage: bench/bench_failover.py [--build build-dir] [--repeat N]
Prints Markdown tables (medians over --repeat runs, default 3).
"""
import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
DATA = os.environ.get("TETHER_FMNIST", "/usr/share/datasets/fashion-mnist")
ENV = {
    "TETHER_HEARTBEAT_MS": "100",
    "TETHER_HEARTBEAT_TIMEOUT_MS": "1000",
    "TETHER_LAST_CALL_MS": "300",
    "TETHER_COLL_DEADLINE_MS": "5000",
    "TETHER_LOG": "warn",
}
TRAIN = ["--lr", "0.05", "--log-every", "1", "--seed", "3", "--train-limit", "8192",
         "--batch", "256", "--epochs", "4", "--max-steps", "128"]
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z")
STEP = re.compile(r"epoch (\d+)/\d+ \[[#.]*\] (\d+)/(\d+)")


def stamp(line):
    m = STAMP.search(line)
    if not m:
        return None
    dt = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
    return dt.replace(tzinfo=datetime.timezone.utc).timestamp()


def launch(build, backend, shards, log, extra=()):
    argv = [os.path.join(build, "tools", "tether-launch"), "--workers", "4", "--shards",
            str(shards), "--min-workers", "3", "--max-restarts", "0", "--", "tether-train",
            "--data", DATA, "--backend", backend, *TRAIN, *extra]
    env = dict(os.environ, **ENV)
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def wait_step(path, at, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            for line in f:
                m = STEP.search(line)
                if m and (int(m.group(1)) - 1) * int(m.group(3)) + int(m.group(2)) >= at:
                    return
        time.sleep(0.01)
    raise RuntimeError(f"no step {at} in {path}")


def pid_of(path, index):
    with open(path, errors="replace") as f:
        for line in f:
            m = re.search(rf"started worker {index}: pid (\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError("no worker pid")


def one_kill(build, tmp, rep, backend, shards):
    path = os.path.join(tmp, f"kill-{backend}{shards}-{rep}.log")
    with open(path, "w") as log:
        p = launch(build, backend, shards, log)
        wait_step(path, 20)
        victim = pid_of(path, 1)
        os.kill(victim, signal.SIGKILL)
        t_kill = time.time()
        p.wait(120)
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    detect = [stamp(l) for l in lines if ("tt_ring.c" in l or "tt_ps.c" in l) and
              ("disconnected" in l or "timed out" in l or "ended while" in l)]
    acked = [stamp(l) for l in lines if "resumes at step" in l]
    firsts = [stamp(l) for l in lines if "first step after the regroup" in l]
    agree = [float(m.group(1)) for l in lines
             for m in [re.search(r"agreement ([\d.]+) ms", l)] if m]
    # a loss the coordinator saw before the next step began fails no step:
    # its first step is no redo and says so
    redo = [float(m.group(1)) for l in lines
            for m in [re.search(r"(?:redo|agreement to step done) ([\d.]+) ms", l)] if m]
    if not (detect and acked and firsts and agree and redo):
        raise RuntimeError(f"incomplete failover log in {path}")
    t_det = min(t for t in detect if t is not None)
    total = max(firsts) - t_kill
    row = {"detection": (t_det - t_kill) * 1e3, "agreement": max(agree), "redo": max(redo),
           "total": total * 1e3}
    row["regroup"] = row["total"] - row["detection"] - row["agreement"] - row["redo"]
    return row


def rate(build, tmp, backend, shards):
    metrics = os.path.join(tmp, f"rate-{backend}.json")
    with open(os.path.join(tmp, f"rate-{backend}.log"), "w") as log:
        p = launch(build, backend, shards, log, ["--metrics-json", metrics])
        if p.wait(300) != 0:
            raise RuntimeError(f"{backend} run failed")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    ex = statistics.median(r["examples_per_s"] for r in rows[1:] or rows)
    return ex / 256.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-failover-")
    keys = ["detection", "regroup", "agreement", "redo", "total"]
    print(f"kill -9 of 1 of 4 workers, 784-256-256-10, batch 256 (median of {a.repeat}; ms)\n")
    print("| backend | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for backend, shards in (("ring", 0), ("ring", 2), ("ps", 2)):
        rows = [one_kill(a.build, tmp, r, backend, shards) for r in range(a.repeat)]
        label = backend if shards == 0 else f"{backend} ({shards} shards)"
        if backend == "ring" and shards:
            label += ", PS fallback"
        print(f"| {label} | " +
              " | ".join(f"{statistics.median(r[k] for r in rows):.0f}" for k in keys) + " |")
    print("\nsteps/s, 4 workers, fault-free runs\n")
    print("| ring | ps (2 shards) |\n|---:|---:|")
    print(f"| {rate(a.build, tmp, 'ring', 0):.1f} | {rate(a.build, tmp, 'ps', 2):.1f} |")
    print(f"\nlogs: {tmp}")


if __name__ == "__main__":
    main()
