#!/usr/bin/env python3
"""Failover stress: many kills, drains and restarts of real tether-train jobs
through tether-launch, each checked against the fault-free single-process
run (1e-5 relative), as test_failover.py checks one of each. Not part of
ctest: a full pass takes 10-15 minutes on a 2-core machine. Run it after
touching failover, the step numbering, the shard servers' redo rules or
checkpoints:

  TETHER_BUILD_DIR=build tests/integration/stress_failover.py [SCENARIO...]

Scenarios (all by default):
  random      random victim and step, update on the shards (the case CI
              caught: a step dropped after a kill between two steps)
  boundary    rank 0 or 2 killed at steps 19, 20, 21 (around the epoch end)
              on ring, ps and ps with the update on the shards
  checkpoint  the same three with a checkpoint every 5 steps, kills at and
              just after checkpoint boundaries
  restart     a kill and a restart (4 -> 3 -> 4) at epoch boundaries
  drain       tetherctl drain of rank 0 or 2 mid-epoch and at the epoch end
Exit status 1 when any run failed; the logs of a failed run are kept."""
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_failover as tf  # noqa: E402
from tt_harness import Harness, read_params, rel_diff  # noqa: E402

SHARDS = ["--update", "shards"]
BACKENDS = [("ring", []), ("ps", []), ("ps", SHARDS)]


def label(backend, extra):
    return backend + ("-shards" if extra else "")


def kill(name, seed, backend, extra, ckpt_every=0, **kw):
    def run(h):
        ck = ["--checkpoint-dir", os.path.join(h.dir, "ck"),
              "--checkpoint-every-steps", str(ckpt_every)] if ckpt_every else []
        rows, _ = tf.run_with_kill(h, name, seed, backend=backend, extra=[*extra, *ck],
                                   world_refs=True, **kw)
        if kw.get("restarts"):
            assert rows[-1]["world_size"] == 4, [r["world_size"] for r in rows]
    return name, run


def random_cases():
    for seed in (2, 6, 10, 14, 19, 28, 29, 31, 32, 37, 42, 43, 46, 49):
        yield kill(f"random-{seed}", seed, "ps", SHARDS, restarts=0)


def boundary_cases():
    for backend, extra in BACKENDS:
        for victim in (0, 2):
            for at in (19, 20, 21):
                yield kill(f"boundary-{label(backend, extra)}-v{victim}-at{at}", 1, backend,
                           extra, restarts=0, pace_ms=250, victim=victim, at=at)


def checkpoint_cases():
    for backend, extra in BACKENDS:
        for victim in (0, 1):
            for at in (5, 6, 10, 11, 15):
                yield kill(f"checkpoint-{label(backend, extra)}-v{victim}-at{at}", 1, backend,
                           extra, ckpt_every=5, restarts=0, pace_ms=100, victim=victim, at=at)


def restart_cases():
    for backend, extra in BACKENDS:
        for victim, at in ((0, 8), (1, 8), (0, 12), (2, 9)):
            yield kill(f"restart-{label(backend, extra)}-v{victim}-at{at}", 101, backend, extra,
                       restarts=1, spe=4, epochs=10, pace_ms=tf.REJOIN_PACE_MS, victim=victim,
                       at=at)


def drain(h, backend, extra, who, at):
    seed, spe, epochs = 3, tf.STEPS_PER_EPOCH, tf.EPOCHS
    p, coord, out, _ = tf.start_drain_job(h, seed, spe, epochs, backend, shards=2, extra=extra)
    p.wait_line(lambda l: tf.global_step(l) >= at, 90, f"step {at}", stream="log")
    rc, text, err = h.ctl(coord, "drain", "launch", who, "--wait", "--timeout-ms", "20000",
                          check=False)
    assert rc == 0 and "left job launch" in text, (rc, text, err)
    rc = p.wait(180)
    assert rc == 0, "\n".join(p.lines("log"))[-3000:]
    d = rel_diff(read_params(out), tf.reference(h, seed, spe, epochs))
    print(f"  {text.strip()}; relative difference to the fault-free run {d:.2e}")
    assert d < 1e-5, d


def drain_cases():
    for backend, extra in BACKENDS:
        for who, at in (("worker-0", 6), ("worker-0", 19), ("worker-2", 20)):
            yield (f"drain-{label(backend, extra)}-{who}-at{at}",
                   lambda h, b=backend, e=extra, w=who, a=at: drain(h, b, e, w, a))


SCENARIOS = {"random": random_cases, "boundary": boundary_cases,
             "checkpoint": checkpoint_cases, "restart": restart_cases, "drain": drain_cases}


def main(argv):
    if not tf.have_data():
        print(f"SKIPPED: no Fashion-MNIST at {tf.DATA}")
        return 77
    picked = argv or list(SCENARIOS)
    unknown = [s for s in picked if s not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}", file=sys.stderr)
        return 2
    failed = []
    total = 0
    for scenario in picked:
        for name, run in SCENARIOS[scenario]():
            total += 1
            h = Harness(name)
            ok = False
            try:
                run(h)
                ok = True
            except Exception:
                traceback.print_exc(limit=2)
            finally:
                h.close(failed=not ok)
            print(f"{'PASS' if ok else 'FAIL'} {name}", flush=True)
            if not ok:
                failed.append(name)
    print(f"{total - len(failed)} of {total} passed" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
