#!/usr/bin/python3
"""security_compare.py - what the cluster key costs the ring all-reduce,
measured side by side in one run on this host.

Three modes of the same build, alternated round by round (--reps rounds):
  none   no key: ZeroMQ's NULL mechanism, as without TETHER_KEY_FILE;
  plain  a key with "data = plain" (the default): links authenticate with
         PLAIN through the ZAP handler, payloads travel as they are;
  curve  a key with "data = curve" (tetherctl keygen --encrypt-data):
         every payload is encrypted and authenticated (CURVE).
Each round runs `bench_allreduce -q 1 -T 1` (payloads over loopback TCP, as
between hosts: on one host the ring's payloads go through shared memory,
which no key governs) with the same world and sizes. The table shows per
size the median time over the rounds with [min-max] and each mode's ratio
to `none`: ratios, because this machine is shared and noisy.

Usage:
  bench/security_compare.py --build BUILD [--reps 3] [--world 2]
                            [--max-bytes 16777216] [--iters-pct 50]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile


def keygen(build, path, encrypt):
    argv = [os.path.join(build, "tools/tetherctl"), "keygen", path]
    if encrypt:
        argv.append("--encrypt-data")
    subprocess.run(argv, check=True, capture_output=True)


def run(build, args, key):
    argv = [os.path.join(build, "bench/bench_allreduce"), "-q", "1", "-T", "1", *args]
    if key:
        argv += ["-k", key]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "tether":
            rows[int(f[2])] = float(f[3])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument("--iters-pct", type=int, default=50)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tether-seccmp-")
    keys = {"none": None, "plain": os.path.join(tmp, "plain.key"),
            "curve": os.path.join(tmp, "curve.key")}
    keygen(a.build, keys["plain"], False)
    keygen(a.build, keys["curve"], True)
    args = ["-w", str(a.world), "-s", str(a.max_bytes), "-i", str(a.iters_pct)]
    times = {m: {} for m in keys}
    for r in range(a.reps):
        for mode, key in keys.items():
            for size, us in run(a.build, args, key).items():
                times[mode].setdefault(size, []).append(us)
        print(f"# round {r + 1}/{a.reps} done", file=sys.stderr, flush=True)
    for k in keys.values():
        if k:
            os.unlink(k)
    os.rmdir(tmp)
    print(f"# ring all-reduce, W={a.world}, payloads over loopback TCP (-T 1), "
          f"median time over {a.reps} alternating rounds [min-max], ratio to none")
    print(f"{'bytes':>10} {'none us':>22} {'plain us':>22} {'plain/none':>10} "
          f"{'curve us':>22} {'curve/none':>10} {'curve GB/s':>10}")
    for size in sorted(times["none"]):
        med = {m: statistics.median(times[m][size]) for m in keys}
        cell = {m: f"{med[m]:.0f} [{min(times[m][size]):.0f}-{max(times[m][size]):.0f}]"
                for m in keys}
        bus = size / med["curve"] / 1e3 * 2 * (a.world - 1) / a.world
        print(f"{size:>10} {cell['none']:>22} {cell['plain']:>22} "
              f"{med['plain'] / med['none']:>9.2f}x {cell['curve']:>22} "
              f"{med['curve'] / med['none']:>9.2f}x {bus:>10.3f}")


if __name__ == "__main__":
    main()
