#!/usr/bin/python3
"""allreduce_compare.py - tether's ring all-reduce next to torch.distributed/gloo,
measured side by side in one run on this host.

One command alternates the two systems, world size by world size, and repeats
the whole round: tether W=2, gloo W=2, tether W=4, gloo W=4, ... x --reps
(with several --bench builds, each of them runs before gloo, in order).
Both use the same method (nccl-tests style, as shared/peers/allreduce_torch_gloo.py):
float32 SUM in place; per size a correctness check, 5 warm-up calls, then N
iterations that each run a barrier and time ONE call; an iteration's time is
the max over ranks; a run reports the median. busbw = bytes/time * 2(W-1)/W.
The table shows, per (W, size), the median busbw over the repetitions with
[min-max], and the ratio of the two medians. Only numbers from this run are
compared; nothing is read from earlier runs.

tether is run with `bench_allreduce -q 1` (its rows: "tether W bytes us busbw").
gloo runs in a child /usr/bin/python3 (Debian's python3-torch), one process
per rank, 1 torch/OpenBLAS thread each, GLOO_SOCKET_IFNAME=lo.

Usage:
  bench/allreduce_compare.py --bench BUILD/bench/bench_allreduce [OTHER_BUILD/...]
                             [--reps 3]
                             [--worlds 2 4] [--min-bytes 1048576]
                             [--max-bytes 67108864] [--iters-pct 100]
                             [--torch-python /usr/bin/python3]
                             [--bench-args '-t 2'] [--tcp-too]

The ranks share this host, so tether's ring puts its payloads in shared
memory (docs/collectives.md); --tcp-too also runs every build with -T 1
(payloads over loopback TCP, as between hosts), named "<name>-tcp".
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
ITERS = [200, 200, 50, 20, 10]  # the same counts as bench_allreduce.c
WARMUP = 5


def fmt_size(b):
    return f"{b >> 20}MiB" if b >= 1 << 20 else f"{b >> 10}KiB"


# ---- gloo side: runs inside the torch python ------------------------------


def gloo_worker(rank, world, port, sizes, iters, q):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for size, n_it in zip(sizes, iters):
        n = size // 4
        t = torch.full((n,), float(rank + 1), dtype=torch.float32)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        if not torch.all(t == world * (world + 1) / 2):
            raise RuntimeError(f"rank {rank}: wrong all_reduce result for size {size}")
        t.zero_()
        for _ in range(WARMUP):
            dist.all_reduce(t)
        times = torch.zeros(n_it, dtype=torch.float64)
        for i in range(n_it):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        if rank == 0:
            srt = sorted(times.tolist())
            med = srt[n_it // 2] if n_it % 2 else 0.5 * (srt[n_it // 2 - 1] + srt[n_it // 2])
            rows.append((size, med))
    dist.destroy_process_group()
    if rank == 0:
        q.put(rows)


def gloo_main(world, sizes, iters):
    # one compute thread per rank; must be set before torch is imported
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(v, "1")
    import socket

    import torch.multiprocessing as mp

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(gloo_worker, args=(world, port, sizes, iters, q), nprocs=world, join=True)
    for size, med in q.get():
        bus = size / med / 1e9 * 2 * (world - 1) / world
        print(f"gloo {world} {size} {med * 1e6:.1f} {bus:.4f}", flush=True)


# ---- driver -----------------------------------------------------------------


def parse_rows(text, name):
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] in ("tether", "gloo"):
            rows[(name, int(f[1]), int(f[2]))] = float(f[4])
    return rows


def run(cmd, name):
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return parse_rows(p.stdout, name), time.time() - t0


def load_str():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def one_round(a, sizes, iters, rnd, results):
    me = os.path.abspath(__file__)
    for w in a.worlds:
        cmds = []
        for name, path, extra in variants(a):
            cmds.append((name, [path, "-q", "1", "-w", str(w), "-m", str(a.min_bytes), "-s",
                                str(a.max_bytes), "-i", str(a.iters_pct)] + a.bench_args.split()
                         + extra))
        cmds.append(("gloo", [a.torch_python, me, "--gloo-world", str(w), "--sizes",
                              ",".join(map(str, sizes)), "--iters", ",".join(map(str, iters))]))
        for name, cmd in cmds:
            load = load_str()
            rows, secs = run(cmd, name)
            print(f"# round {rnd + 1} {name:8} W={w}: {secs:5.1f} s, loadavg before {load}",
                  flush=True)
            for key, bus in rows.items():
                results.setdefault(key, []).append(bus)


def variants(a):
    """(name, path, extra args): tether for the first --bench, tether2,
    tether3, ... for the others; with --tcp-too each also as <name>-tcp."""
    out = []
    for i, path in enumerate(a.bench):
        name = "tether" if i == 0 else f"tether{i + 1}"
        out.append((name, path, []))
        if a.tcp_too:
            out.append((name + "-tcp", path, ["-T", "1"]))
    return out


def names(a):
    return [v[0] for v in variants(a)]


def rng(v):
    return f"{statistics.median(v):5.2f} [{min(v):.2f}-{max(v):.2f}]" if v else "    -"


def print_table(a, sizes, results):
    print(f"\n# busbw GB/s (GB = 1e9 B), median over {a.reps} rounds [min-max];"
          f" ratio = tether median / gloo median, min-max of the per-round ratios")
    for name, path, extra in variants(a):
        print(f"# {name} = {path} {' '.join(extra)}")
    head = f"{'W':>2} {'size':>6} {'gloo busbw':>20}"
    for name in names(a):
        head += f" {name + ' busbw':>20} {'ratio':>7} {'min-max':>10}"
    print(head)
    for w in a.worlds:
        for b in sizes:
            g = results.get(("gloo", w, b), [])
            line = f"{w:>2} {fmt_size(b):>6} {rng(g):>20}"
            for name in names(a):
                t = results.get((name, w, b), [])
                ratio = statistics.median(t) / statistics.median(g) if t and g else 0
                per = sorted(x / y for x, y in zip(t, g)) if len(t) == len(g) else []
                pr = f"{per[0]:.2f}-{per[-1]:.2f}" if per else "-"
                line += f" {rng(t):>20} {ratio:6.2f}x {pr:>10}"
            print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", nargs="+", help="bench_allreduce binaries (more than one:"
                    " builds to compare, e.g. before/after a change)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--iters-pct", type=int, default=100)
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    ap.add_argument("--bench-args", default="", help="extra bench_allreduce flags, e.g. '-t 2'")
    ap.add_argument("--tcp-too", action="store_true",
                    help="also run each build with -T 1 (payloads over TCP)")
    ap.add_argument("--gloo-world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    ap.add_argument("--iters", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.gloo_world:
        gloo_main(a.gloo_world, [int(x) for x in a.sizes.split(",")],
                  [int(x) for x in a.iters.split(",")])
        return
    if not a.bench:
        ap.error("--bench is required")
    pick = [i for i, s in enumerate(SIZES) if a.min_bytes <= s <= a.max_bytes]
    sizes = [SIZES[i] for i in pick]
    iters = [max(3, ITERS[i] * a.iters_pct // 100) for i in pick]
    print(f"# tether ring vs torch.distributed gloo, float32 SUM in place, one host"
          f" (gloo: loopback TCP);"
          f" nproc={os.cpu_count()}; {a.reps} rounds of {a.worlds} x (tether, gloo);"
          f" bench args: {a.bench_args or '-'}")
    results = {}
    for rnd in range(a.reps):
        one_round(a, sizes, iters, rnd, results)
    print_table(a, sizes, results)


if __name__ == "__main__":
    main()
