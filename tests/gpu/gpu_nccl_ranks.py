#!/usr/bin/env python3
"""GPU job tests of the NCCL backend with two and three ranks on one GPU.

NCCL refuses two ranks on one device: it compares the ranks' host hashes
and PCI bus ids ("Duplicate GPU detected"). Here every worker gets an
NCCL_HOSTID of its own, so NCCL takes each rank for a host of its own and
joins them with its network transport (sockets on the loopback, no
InfiniBand) instead of peer-to-peer or shared memory, while the GPU
time-slices the processes' kernels. A collective takes milliseconds that
way, but it is NCCL's own multi-rank code that runs: the bootstrap from
the unique id the coordinator relays, rings over the network transport, a
peer that dies in the middle of a collective, revoke, ncclCommShrink:
what a job of one GPU per host goes through, on a machine with one GPU.

  * two ranks: a 2-epoch job on NCCL, gradients reduced in device memory
    on both ranks, ends within 1e-4 of the one-process CUDA run (float32,
    other row counts per product); the difference to the same job on the
    ring with device staging is printed (both add two floats per element);
  * kill: three ranks and a shard server; worker 1 is killed with SIGKILL.
    The survivors' generation is no shrink (docs/gpu.md: NCCL cannot
    shrink a communicator that saw its peer fail); the redone step and the
    next ones go through the shard server (the nccl+ps row) while both
    survivors build a new communicator, and rank 0 switches back to NCCL
    at the announced step (the time from the kill is printed); every epoch
    counts its examples once and the parameters end within 1e-4 of the
    one-process run;
  * drain: three ranks; tetherctl drains worker 1 at a step boundary; the
    two others shrink the healthy communicator and finish the same way.

Exits 77 (skipped) without a GPU, a build with CUDA and NCCL, or the
Fashion-MNIST data, and says why.
"""
import datetime
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from tt_harness import (BUILD, binary, free_port, program_skips, read_params,  # noqa: E402
                        rel_diff, run_tests)
from test_failover import (DATA, EPOCHS, FAST, STEPS_PER_EPOCH, epochs_counted,  # noqa: E402
                           global_step, launch_argv, worker_pid)
from test_failover import reference as failover_reference  # noqa: E402

SEED = 3
TOL = 1e-4
# FAST's 5 s collective deadline is for host rings; kernels that share the
# GPU by time slices, behind sockets, get more.
ENV = {**FAST, "TETHER_COLL_DEADLINE_MS": "20000", "TETHER_LOG": "info",
       "TETHER_CUDA_DEVICE": "0", "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1",
       "NCCL_NET": "Socket", "NCCL_MNNVL_ENABLE": "0"}
# The worker's command: NCCL_HOSTID from the launcher's local rank, then
# tether-train itself (exec: the launcher's pid is the trainer's).
OWN_HOST = ["/bin/sh", "-c", 'NCCL_HOSTID="tether-gpu-test-$TETHER_LOCAL_RANK" exec "$0" "$@"']


def skip_reason():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        return f"no Fashion-MNIST under {DATA}"
    return (program_skips(os.path.join(BUILD, "tests", "gpu", "gpu_cuda_smoke")) or
            program_skips(os.path.join(BUILD, "tests", "gpu", "nccl_ps_check")))


def reference(h):
    """The one-process CUDA run of the same steps (trained once: every test
    trains the same steps, and a short device session counts seconds)."""
    return failover_reference(h, SEED, STEPS_PER_EPOCH, EPOCHS, extra=("--device", "cuda"))


def launch(h, name, workers, shards, backend="nccl", launcher=(), train=()):
    """tether-launch of `workers` CUDA ranks, each its own host for NCCL;
    returns the launcher and the files of the parameters and metrics."""
    out, metrics = (os.path.join(h.dir, name + ext) for ext in (".bin", ".json"))
    argv = launch_argv(workers, shards, backend, SEED, out,
                       launcher=["--daemon-log-level", "info", *launcher],
                       train=["--device", "cuda", "--metrics-json", metrics, *train],
                       program=(*OWN_HOST, binary("tether-train")))
    return h.spawn(name, argv, env=ENV), out, metrics


def text_of(p):
    return "\n".join(p.lines() + p.lines("log"))


def per_worker(text, pattern):
    """The workers (by the launcher's prefix) that logged a line matching
    `pattern`."""
    return sorted({int(m.group(1)) for m in re.finditer(rf"\[worker (\d+)\][^\n]*{pattern}",
                                                        text)})


def check_epochs(metrics, world):
    rows = epochs_counted(metrics)
    assert rows[-1]["world_size"] == world, rows[-1]


def first_world2(text):
    """The generation of two the coordinator formed first, and the one it
    was announced to shrink (None: none)."""
    m = re.search(r"generation (\d+) formed, world 2, [^\n]*", text)
    assert m is not None, [ln for ln in text.splitlines() if "formed" in ln]
    s = re.search(r"shrinks generation (\d+) by rank\(s\) 1\b", m.group(0))
    return int(m.group(1)), int(s.group(1)) if s else None


def communicators(text, gen):
    """Which workers shrank a communicator into generation `gen`, and which
    had one ready in it."""
    shrank = per_worker(text, rf"gen={gen} rank \d/2: shrinking the communicator of gen ")
    ready = per_worker(text, rf"gen={gen} rank \d/2: communicator ready")
    print(f"  generation {gen}: workers {shrank} shrank their communicator, {ready} had one ready")
    return shrank, ready


def log_time(line):
    """A log line's own time (its ISO timestamp), in seconds since the epoch."""
    m = re.search(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    return datetime.datetime.fromisoformat(m.group(1)).replace(
        tzinfo=datetime.timezone.utc).timestamp() if m else None


def test_two_ranks(h):
    ref = reference(h)
    p, out, metrics = launch(h, "nccl2", 2, 0)
    rc = p.wait(240)
    text = text_of(p)
    assert rc == 0, text[-3000:]
    on_device = per_worker(text, "gradients reduced in device memory")
    assert on_device == [0, 1], f"workers reducing on the device: {on_device}"
    check_epochs(metrics, 2)
    d = rel_diff(read_params(out), ref)
    print(f"  nccl, 2 ranks: relative difference to the one-process CUDA run: {d:.2e}")
    ring, ring_out, _ = launch(h, "ring2", 2, 0, backend="ring")
    if ring.wait(240) == 0:
        print(f"  nccl vs ring (device staging), 2 ranks: "
              f"{rel_diff(read_params(out), read_params(ring_out)):.2e}")
    assert d < TOL, f"2 NCCL ranks differ from the one-process run by {d:.2e} (limit {TOL})"


def test_kill_builds_afresh(h):
    ref = reference(h)
    p, out, metrics = launch(h, "kill", 3, 1,
                             launcher=["--min-workers", "2", "--max-restarts", "0"])
    p.wait_line(lambda ln: global_step(ln) >= 8, 180, "step 8", stream="log")
    pid = worker_pid(p, 1)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    rc = p.wait(240)
    text = text_of(p)
    summary = [ln for ln in text.splitlines() if "summary:" in ln]
    print(f"  killed worker 1 (pid {pid}) at step >= 8; launcher exit {rc}; "
          f"{summary[-1] if summary else 'no summary'}")
    assert rc == 0 or "finished=2 failed=1" in text, text[-3000:]
    assert "resumes at step" in text, "no failover happened:\n" + text[-3000:]
    # No shrink after a death: a survivor whose proxy saw the peer fail
    # cannot shrink (docs/gpu.md); every survivor builds afresh.
    gen, of = first_world2(text)
    assert of is None, f"generation {gen} was announced as a shrink of {of} after a death"
    shrank, _ = communicators(text, gen)
    assert not shrank, shrank
    switched = [ln for ln in text.splitlines() if "switched to NCCL at step" in ln]
    assert switched, "the shard-server steps never switched back to NCCL:\n" + text[-3000:]
    back = log_time(switched[-1])
    print(f"  {switched[-1].split('coll ', 1)[-1]}"
          f"{f'; {back - killed_at:.1f} s after the kill' if back else ''}")
    check_epochs(metrics, 2)
    d = rel_diff(read_params(out), ref)
    print(f"  relative difference to the one-process CUDA run: {d:.2e}")
    assert d < TOL, f"parameters differ by {d:.2e} (limit {TOL})"


def test_drain_shrinks(h):
    ref = reference(h)
    port = free_port()
    coord = f"tcp://127.0.0.1:{port}"
    p, out, metrics = launch(h, "drain", 3, 0,
                             launcher=["--min-workers", "2", "--max-restarts", "2",
                                       "--coordinator-port", str(port)],
                             train=["--pace-ms", "100"])
    p.wait_line(lambda ln: global_step(ln) >= 6, 180, "step 6", stream="log")
    rc, said, err = h.ctl(coord, "drain", "launch", "worker-1", "--wait", "--timeout-ms",
                          "30000", check=False)
    assert rc == 0 and "left job launch" in said, (rc, said, err)
    print(f"  drain: {said.strip()}")
    rc = p.wait(240)
    text = text_of(p)
    assert rc == 0 and "finished=3 failed=0 restarts=0" in text, text[-3000:]
    # nobody reported a failure: the survivors took up the next step
    assert "EUNREACHABLE" not in text and "ETIMEDOUT" not in text, text[-3000:]
    # A drained rank leaves a healthy communicator: both survivors shrink it.
    gen, of = first_world2(text)
    assert of is not None, f"generation {gen} was not announced as a shrink"
    shrank, ready = communicators(text, gen)
    assert shrank == [0, 2] and ready == [0, 2], (shrank, ready)
    check_epochs(metrics, 2)
    d = rel_diff(read_params(out), ref)
    print(f"  relative difference to the one-process CUDA run: {d:.2e}")
    assert d < TOL, f"parameters differ by {d:.2e} (limit {TOL})"


if __name__ == "__main__":
    why = skip_reason()
    if why is not None:
        print(f"SKIPPED: {why}")
        sys.exit(77)
    run_tests([test_two_ranks, test_kill_builds_afresh, test_drain_shrinks])
