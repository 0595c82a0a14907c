#!/usr/bin/env python3
"""Failover of tether-train (worker/train/tt_train_ft): real processes
through tether-launch, workers killed for real with SIGKILL.

  * kill: for several seeds, a 4-worker job (ring backend, 2 shards) loses a
    random worker at a random step; the 3 survivors regroup, agree on the
    state, run the new generation's first 8 steps on the shard servers
    (the coordinator's announced PS fallback) and the rest on the new ring,
    and finish; the final parameters equal a fault-free single-process
    run's within 1e-5 relative, and every epoch consumed exactly the
    dataset size (metrics JSON "examples");
  * restart: the same with the worker restarted by tether-launch: the world
    goes 4 -> 3 -> 4 and the result is again the fault-free one;
  * SIGSTOP: a stopped worker is evicted within the heartbeat timeout;
    after SIGCONT it is fenced, joins again as a new member and pulls the
    state; the job ends with 4 workers and the fault-free parameters;
  * below min_workers: 2 workers, min 2, one killed and not restarted; after
    the regroup deadline the job fails with a sentence saying why and every
    process exits;
  * a finished job: 2 workers complete a short run and tell the coordinator;
    the job is FINISHED (also after a coordinator restart) and a third
    worker that comes afterwards exits 0 at once with one line saying so,
    instead of waiting for a generation that never forms;
  * flapping guard rails (tt_testclient workers, no dataset needed): a worker
    replaced again and again waits out a doubling cool-down before each
    re-join from its second eviction on, and the regroup that exceeds
    max_regroups_per_hour fails the job with a sentence naming the bound.

Equivalence uses --lr 0.05 (see test_train.py for why) and 40 steps (2
epochs of 20 on the first 5120 examples). Longer runs are not a stricter
test: float32 summation-order noise (about 1e-8 right after a failover,
the same as a fault-free run on another world size) is amplified by the
optimisation itself; measured for seed 101 with the kill at step 20: 2e-8
at step 40, 2.5e-8 at step 44, then doubling every two steps to 1e-4 at
step 64, with no jump at the failover step.
"""
import json
import os
import random
import re
import signal
import time

from tt_harness import (binary, free_port, launched_pid, parse_kv, read_params, rel_diff,
                        run_tests, wait_for)

DATA = os.environ.get("TETHER_FMNIST", "/usr/share/datasets/fashion-mnist")
STEPS_PER_EPOCH = 20
EPOCHS = 2
SEEDS = [int(s) for s in os.environ.get("TETHER_FAILOVER_SEEDS", "1,2,3,4,5").split(",")]
# Step pacing of the jobs a restarted worker must join before they end: it
# starts a process, loads the dataset and registers while the 4 -> 3
# regroup happens, on a 2-core machine that may be running a sanitizer
# build and another suite at the same time (100 ms once proved too short).
REJOIN_PACE_MS = 150
FAST = {
    "TETHER_HEARTBEAT_MS": "100",
    "TETHER_HEARTBEAT_TIMEOUT_MS": "1000",
    "TETHER_LAST_CALL_MS": "300",
    "TETHER_COLL_DEADLINE_MS": "5000",
    "TETHER_REQUEST_TIMEOUT_MS": "2000",
    "TETHER_REGROUP_DEADLINE_MS": "30000",
}


def have_data():
    return os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz"))


def train_args(seed, spe=STEPS_PER_EPOCH, epochs=EPOCHS):
    return ["--max-steps", str(spe * epochs), "--epochs", str(epochs), "--lr", "0.05", "--log-every", "1",
            "--seed", str(seed), "--train-limit", str(spe * 256), "--batch", "256",
            ]


_refs = {}


def reference(h, seed, spe, epochs, extra=()):
    """Parameters of a fault-free single-process run (`extra`: further
    tether-train flags, such as the device)."""
    key = (seed, spe, epochs, tuple(extra))
    if key not in _refs:
        name = f"ref-{seed}-{spe}x{epochs}" + "".join("-" + a.lstrip("-") for a in extra)
        out = os.path.join(h.dir, name + ".bin")
        p = h.spawn(name, [binary("tether-train"), "--backend", "local", "--data", DATA,
                           *train_args(seed, spe, epochs), "--dump-params", out, *extra])
        assert p.wait(120) == 0, f"reference run {name} failed"
        _refs[key] = read_params(out)
    return _refs[key]


def launch_argv(workers, shards, backend, seed, out, launcher=(), train=(), spe=STEPS_PER_EPOCH,
                epochs=EPOCHS, program=("tether-train",)):
    """tether-launch of `workers` tether-train ranks and `shards` shard
    servers with these tests' training settings, the parameters dumped to
    `out`; `launcher` and `train` are the two programs' further flags,
    `program` the worker's command up to those flags."""
    return [binary("tether-launch"), "--workers", str(workers), "--shards", str(shards),
            *launcher, "--", *program, "--data", DATA, "--backend", backend,
            *train_args(seed, spe, epochs), "--dump-params", out, *train]


def fault_free(h, seed, workers, backend, shards, extra, spe, epochs):
    """Parameters of the same job on `workers` ranks without a failure
    (checkpoint settings dropped: they do not change an update)."""
    args, skip = [], False
    for a in extra:
        if skip or a.startswith("--checkpoint"):
            skip = not skip and not a.startswith("--checkpoint=")
            continue
        args.append(a)
    name = f"nokill-{seed}-{workers}"
    out = os.path.join(h.dir, name + ".bin")
    p = h.spawn(name, launch_argv(workers, shards, backend, seed, out, train=args, spe=spe,
                                  epochs=epochs), env=FAST)
    assert p.wait(180) == 0, f"fault-free run of seed {seed} on {workers} workers failed"
    return read_params(out)


def epochs_counted(metrics, spe=STEPS_PER_EPOCH, epochs=EPOCHS, pace_ms=0):
    """The metrics JSON rows of a run, checked: one per epoch, each having
    consumed exactly the dataset (spe batches of 256). With paced steps no
    epoch's rate may beat one batch per pace by much (the epoch a failover
    interrupted once reported all its examples over the time since the
    regroup): by spe / (spe - 2) at most, since a process's first step is
    not paced (--pace-ms counts from the step before) and neither is a step
    a rank behind receives in the agreement instead of computing it."""
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1)), rows
    assert all(r["examples"] == spe * 256 for r in rows), rows
    if pace_ms > 0 and spe > 2:
        top = 256 * 1000.0 / pace_ms * spe / (spe - 2)
        assert all(0 < r["examples_per_s"] <= top and r["wall_s"] > 0 for r in rows), (
            f"an epoch trained faster than {spe - 2} paced steps of {pace_ms} ms allow: {rows}")
    return rows


STEP_RE = re.compile(r"(?:\[worker \d+\] )?epoch (\d+)/\d+ \[[#.]*\] (\d+)/(\d+)")


def global_step(line):
    m = STEP_RE.search(line)
    if not m:
        return -1
    return (int(m.group(1)) - 1) * int(m.group(3)) + int(m.group(2))


def worker_pid(p, index):
    for line in p.lines():
        m = re.search(rf"\[launch\] started worker {index}: pid (\d+)", line)
        if m:
            return int(m.group(1))
    for line in p.lines("log"):
        m = re.search(rf"\[launch\] started worker {index}: pid (\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError(f"no pid for worker {index}")


def run_with_kill(h, name, seed, restarts, shards=2, spe=STEPS_PER_EPOCH, epochs=EPOCHS,
                  pace_ms=0, backend="ring", extra=(), victim=None, at=None, world_refs=False,
                  daemon_info=False):
    """daemon_info: the daemons log at info (their generations) into the
    returned text. world_refs: when the result is 1e-5 or more from the single-process
    run, compare it with fault-free runs of the job on 4 and on 3 workers
    too, and pass when it is that close to one of them. Some seeds' runs
    amplify the float32 difference between one summation order and
    another past 1e-5 within 40 steps, depending on the BLAS kernel: on
    one machine seed 14 on 4 workers without any failure ended 2.4e-5 from
    its single-process run, and its failover run 1.5e-8 from the 4-worker
    one. A lost or repeated step is orders of magnitude further from all
    of them."""
    rng = random.Random(seed)
    pick = rng.randrange(4)
    victim = pick if victim is None else victim
    pick = rng.randrange(2, spe * epochs // 5 if restarts else spe * epochs // 2)
    at = pick if at is None else at
    out = os.path.join(h.dir, f"{name}.bin")
    metrics = os.path.join(h.dir, f"{name}.json")
    argv = launch_argv(4, shards, backend, seed, out,
                       launcher=["--min-workers", "3", "--max-restarts", str(restarts),
                                 *(["--daemon-log-level", "info"] if daemon_info else [])],
                       train=["--metrics-json", metrics, "--pace-ms", str(pace_ms), *extra],
                       spe=spe, epochs=epochs)
    p = h.spawn(name, argv, env=FAST)
    p.wait_line(lambda l: global_step(l) >= at, 90, f"step {at}", stream="log")
    pid = worker_pid(p, victim)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    rc = p.wait(180)
    text = "\n".join(p.lines() + p.lines("log"))
    summary = [l for l in text.splitlines() if "summary:" in l]
    print(f"  seed {seed} ({backend}): killed worker {victim} (pid {pid}) at step >= {at}; launcher exit "
          f"{rc}; {summary[-1] if summary else 'no summary'}; "
          f"{time.monotonic() - killed_at:.1f} s to the end")
    assert "failover" in text and "resumes at step" in text, "no failover happened:\n" + text[-3000:]
    if backend == "ring" and shards > 0:
        # the coordinator announced a PS fallback for the new generation's
        # first steps (--ps-fallback-steps, 8 by default); rank 0 says when
        # the ring took over, with the same updates (checked below)
        switched = [l.split("coll ", 1)[-1] for l in text.splitlines()
                    if "switched to the ring at step" in l]
        print(f"  {switched[-1] if switched else 'never switched back to the ring'}")
        assert switched, "no PS fallback and switch back to the ring:\n" + text[-3000:]
    assert rc == 0 or (restarts == 0 and "finished=3 failed=1" in text), text[-3000:]
    got = read_params(out)
    d = rel_diff(got, reference(h, seed, spe, epochs))
    print(f"  seed {seed}: relative difference to the fault-free run: {d:.2e}")
    for workers in (4, 3) if world_refs and d >= 1e-5 else ():
        dw = rel_diff(got, fault_free(h, seed, workers, backend, shards, extra, spe, epochs))
        print(f"  seed {seed}: relative difference to the fault-free run on {workers} workers: "
              f"{dw:.2e}")
        d = min(d, dw)
    assert d < 1e-5, f"seed {seed}: parameters differ by {d:.2e} (limit 1e-5)"
    return epochs_counted(metrics, spe, epochs, pace_ms), text


def test_kill_random_worker(h):
    """Also: the survivors' generation is not announced as a shrink of the
    old one (NCCL members build a fresh communicator after a death; a
    survivor's may have seen the peer fail, which NCCL cannot shrink)."""
    for seed in SEEDS:
        rows, text = run_with_kill(h, f"kill-{seed}", seed, restarts=0, daemon_info=True)
        assert rows[-1]["world_size"] == 3, rows[-1]
        formed = [ln for ln in text.splitlines() if "formed, world 3" in ln]
        assert formed and not any("shrinks generation" in ln for ln in formed), formed


def test_kill_worker_during_ps_steps(h):
    """The same kill with every step's gradients summed on the two shard
    servers (--backend ps). The shards never complete a round missing a
    rank, so the dead rank's ring neighbours end their PS call as soon as
    its connections close ("disconnected from rank", not the heartbeat
    timeout) and report it; the others' calls end with the new generation;
    the step is redone on the shards with 3 ranks."""
    fast = []
    for seed in SEEDS[:2]:
        rows, text = run_with_kill(h, f"ps-kill-{seed}", seed, restarts=0, backend="ps")
        assert rows[-1]["world_size"] == 3, rows[-1]
        fast.append("disconnected from rank" in text and "heartbeat timeout" not in text)
    print(f"  detected by a neighbour's ring, not the heartbeat timeout: {fast}")
    # A sanitizer build may be slow enough for the 1 s heartbeat timeout
    # to win once; never both times.
    assert any(fast), fast


def test_worker_dies_before_first_agreement(h):
    """A worker that is a member of the first generation and dies before the
    members agree on the state (a crash at start-up): the others' first
    collective fails, and that is a regroup like any other. It used to end
    every worker ('agreeing on the state with the job's members: membership
    changed')."""
    seed = SEEDS[0] + 40
    out = os.path.join(h.dir, "early.bin")
    argv = launch_argv(4, 0, "ring", seed, out,
                       launcher=["--min-workers", "3", "--max-restarts", "0"])
    p = h.spawn("early", argv, env=dict(FAST, TETHER_TRAIN_TEST_DIE_BEFORE_AGREE="worker-2"))
    rc = p.wait(180)
    text = "\n".join(p.lines() + p.lines("log"))
    summary = [l for l in text.splitlines() if "summary:" in l]
    print(f"  launcher exit {rc}; {summary[-1] if summary else 'no summary'}")
    assert "test knob: worker-2 ends before the first agreement" in text, text[-3000:]
    assert "finished=3 failed=1" in text, text[-3000:]
    assert "agreeing on the state" not in text, text[-3000:]
    d = rel_diff(read_params(out), reference(h, seed, STEPS_PER_EPOCH, EPOCHS))
    print(f"  relative difference to the fault-free run: {d:.2e}")
    assert d < 1e-5, d


def test_kill_and_restart(h, backend="ring"):
    seed = SEEDS[0] + 100
    # Paced steps (--pace-ms) stretch the 40 steps so that the restarted
    # worker, which loads the dataset first, joins well before the end even
    # on a loaded 2-core machine; more steps would not do, see the top.
    rows, text = run_with_kill(h, f"restart-{backend}-{seed}", seed, restarts=1, spe=4,
                               epochs=10, pace_ms=REJOIN_PACE_MS, backend=backend)
    assert "restart 1" in text, text[-3000:]
    worlds = [r["world_size"] for r in rows]
    print(f"  world size per epoch: {worlds}")
    assert worlds[-1] == 4, worlds
    # A slow start may regroup 4 ranks once before the kill (a worker that
    # joined after the first generation formed): the growth counted is one
    # after the shrink. A restart quicker than failure detection skips the
    # shrink: the new incarnation's join evicts the dead one and the 4 ranks
    # regroup at once (the coordinator says so).
    shrink = re.search(r"generation (\d+) with 3 ranks resumes", text)
    grows = [int(g) for g in re.findall(r"generation (\d+) with 4 ranks resumes", text)]
    replaced = re.search(r"evicted from generation (\d+): re-joined as incarnation", text)
    print(f"  {'shrunk to 3 ranks, then grew back' if shrink else 'replaced in place'}: "
          f"generations with 4 ranks resumed {grows}")
    after = int(shrink.group(1)) if shrink else int(replaced.group(1)) if replaced else None
    assert after is not None and any(g > after for g in grows), text[-3000:]
    # the restarted worker is behind: the state reaches it through the
    # shard servers on both backends (a ring job is on its PS fallback then)
    moved = [l for l in text.splitlines() if "with 4 ranks resumes" in l]
    print("  " + (moved[-1].split("failover ")[-1] if moved else "no 4-rank resume line"))
    assert any("state through the shards" in l for l in moved), "\n".join(moved)
    return text


def test_restarted_worker_pulls_state_from_shards(h):
    """The same restart on the ps backend: the restarted worker is behind,
    and the state reaches it through the shard servers (the root uploads
    parameters and momentum, the joiner downloads them), not a broadcast
    (test_kill_and_restart checks that)."""
    test_kill_and_restart(h, backend="ps")


def test_update_on_shards_kill_and_restart(h):
    """The shard servers apply the optimizer (--update shards): a worker
    killed mid-step may leave some chunks with the step applied and others
    without; the survivors redo it, the chunks that had applied it replay
    their result instead of applying it twice, and only the parameters move
    between ranks (the optimizer state never leaves the shards). Then a
    restarted worker joins the running job and gets the parameters from a
    survivor. Both end with the fault-free single-process parameters."""
    shards = ["--update", "shards"]
    rows, text = run_with_kill(h, f"shards-kill-{SEEDS[1]}", SEEDS[1], restarts=0, backend="ps",
                               extra=shards)
    assert rows[-1]["world_size"] == 3, rows[-1]
    assert "putting the state" not in text, text[-3000:]
    seed = SEEDS[0] + 100
    rows, text = run_with_kill(h, f"shards-restart-{seed}", seed, restarts=1, spe=4, epochs=10,
                               pace_ms=REJOIN_PACE_MS, backend="ps", extra=shards)
    worlds = [r["world_size"] for r in rows]
    print(f"  world size per epoch: {worlds}")
    assert "restart 1" in text and worlds[-1] == 4, (worlds, text[-3000:])
    moved = [l for l in text.splitlines() if "with 4 ranks resumes" in l]
    print("  " + (moved[-1].split("failover ")[-1] if moved else "no 4-rank resume line"))
    assert any("state broadcast" in l for l in moved), "\n".join(moved)


def test_update_on_shards_kill_after_a_step(h):
    """The update on the shards, rank 0 killed after the last step of
    epoch 1 and before the first of epoch 2 (while every rank is paced
    after the step, so the others fail in the evaluation's all-reduce).
    No rank has told the coordinator of that step yet (a step is reported
    when the next one starts), so the new generation's resume step is one
    behind the state the survivors agree on; the next step must carry the
    agreed number, or the shards take it for a redo of the last one and
    answer with its result, dropping that step's gradients."""
    rows, text = run_with_kill(h, "shards-kill-after-step", SEEDS[0], restarts=0, backend="ps",
                               extra=["--update", "shards"], pace_ms=250, victim=0,
                               at=STEPS_PER_EPOCH)
    assert "metric all-reduce failed" in text, text[-3000:]
    resumed = [l for l in text.splitlines() if "resumes at step" in l]
    print("  " + resumed[-1].split("failover ")[-1])
    assert f"resumes at step {STEPS_PER_EPOCH}:" in resumed[-1], resumed[-1]
    assert rows[-1]["world_size"] == 3, rows[-1]


def test_sigstop_fenced_and_rejoins(h):
    """A hung worker (SIGSTOP) is evicted after the heartbeat timeout and the
    others go on without it; after SIGCONT it learns it was fenced, joins
    again as a new member, pulls the state and the job ends with 4."""
    seed, spe, epochs = 7, 4, 10
    out = os.path.join(h.dir, "stop.bin")
    metrics = os.path.join(h.dir, "stop.json")
    argv = launch_argv(4, 1, "ring", seed, out,
                       launcher=["--min-workers", "3", "--max-restarts", "0"],
                       # time for the re-join, as in test_kill_and_restart
                       train=["--metrics-json", metrics, "--pace-ms", str(REJOIN_PACE_MS)],
                       spe=spe, epochs=epochs)
    p = h.spawn("stop", argv, env=FAST)
    p.wait_line(lambda l: global_step(l) >= 4, 90, "step 4", stream="log")
    pid = worker_pid(p, 2)
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    p.wait_line(lambda l: "worker-2 evicted" in l, 10, "worker-2 evicted", stream="log")
    evicted = time.monotonic() - t0
    p.wait_line(lambda l: "with 3 ranks resumes" in l, 15, "3 ranks resume", stream="log")
    os.kill(pid, signal.SIGCONT)
    rc = p.wait(120)
    text = "\n".join(p.lines() + p.lines("log"))
    print(f"  evicted {evicted:.2f} s after SIGSTOP (heartbeat timeout 1 s); launcher exit {rc}")
    assert rc == 0, text[-3000:]
    assert evicted < 3.0, evicted
    assert "[worker 2]" in text and "fenced" in text, text[-3000:]
    assert re.search(r"generation \d+ with 4 ranks resumes", text), text[-3000:]
    d = rel_diff(read_params(out), reference(h, seed, spe, epochs))
    print(f"  relative difference to the fault-free run: {d:.2e}")
    assert d < 1e-5, d
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    assert [r["examples"] for r in rows] == [spe * 256] * epochs, rows
    assert rows[-1]["world_size"] == 4, rows[-1]


def test_below_min_workers(h):
    """Without tether-launch (whose own min-workers policy would stop the
    job first): the coordinator and two tether-train processes."""
    coord = h.coordinator()
    env = dict(FAST)
    env.update({"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": "belowmin",
                "TETHER_MIN_WORKERS": "2", "TETHER_MAX_WORKERS": "2",
                "TETHER_JOIN_TIMEOUT_MS": "2000", "TETHER_REGROUP_DEADLINE_MS": "6000"})
    ws = []
    for i in range(2):
        e = dict(env, TETHER_WORKER_ID=f"w{i}", TETHER_ENDPOINT=f"tcp://127.0.0.1:{free_port()}")
        ws.append(h.spawn(f"w{i}", [binary("tether-train"), "--data", DATA, "--backend", "ring",
                                    "--epochs", "1000", "--lr", "0.05", "--log-every", "1",
                                    "--train-limit", "4096"], env=e))
    talker = None
    deadline = time.monotonic() + 60
    while talker is None and time.monotonic() < deadline:
        for w in ws:
            if any(global_step(l) >= 5 for l in w.lines("log")):
                talker = w
        time.sleep(0.05)
    assert talker is not None, "no training progress"
    victim = ws[1] if talker is ws[0] else ws[0]
    victim.kill9()
    t0 = time.monotonic()
    rc = talker.wait(30)
    took = time.monotonic() - t0
    text = "\n".join(talker.lines("log"))
    reason = [l for l in text.splitlines()
              if re.search(r"min \d+ workers|min_workers|regroup deadline", l)]
    print(f"  survivor exit {rc} {took:.1f} s after the kill; reason: "
          f"{reason[-1] if reason else '(none)'}")
    assert rc == 1, text[-3000:]
    assert reason, "no sentence naming the bound:\n" + text[-3000:]
    assert took < 20, took


def test_members_show_the_straggler(h):
    """A slow rank does not fail anything; it makes every step as slow as
    itself, and the others' wait is the only trace. Two tether-train
    workers, w1 paced to 150 ms steps: `tetherctl members` shows both ranks'
    step time and wait (their heartbeats carry tether_step_stats) and marks
    w1, the one that waits least, as the straggler. (At 60 ms a TSan build
    sharing two slow CPUs with another test measured w0's wait only 13 ms
    above w1's: the pace must dwarf what the sanitizer adds.)"""
    coord = h.coordinator()
    env = dict(FAST)
    env.update({"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": "slow",
                "TETHER_MIN_WORKERS": "2", "TETHER_MAX_WORKERS": "2"})
    ws = []
    for i, pace in enumerate(("0", "150")):
        e = dict(env, TETHER_WORKER_ID=f"w{i}", TETHER_ENDPOINT=f"tcp://127.0.0.1:{free_port()}")
        # 100 steps an epoch: the evaluation between epochs (every rank's
        # step time includes it) falls into few heartbeat windows
        ws.append(h.spawn(f"w{i}", [binary("tether-train"), "--data", DATA, "--backend", "ring",
                                    "--epochs", "1000", "--train-limit", "25600", "--log-every",
                                    "0", "--pace-ms", pace], env=e))

    def sample():
        rc, out, _ = h.ctl(coord.endpoint, "members", "slow", "--json", check=False)
        ms = {m["worker_id"]: m for m in json.loads(out)["members"]} if rc == 0 else {}
        return ms if len(ms) == 2 and all(m["step_ms"] > 0 for m in ms.values()) else None

    wait_for(lambda: (sample() or {}).get("w1", {}).get("straggler"), 30, "w1 marked")
    samples = []
    for _ in range(10):  # the mark stays on w1 (windows of 8 steps), never on w0
        time.sleep(0.2)
        samples.append(sample())
    on_w1 = sum(1 for s in samples if s and s["w1"]["straggler"])
    on_w0 = sum(1 for s in samples if s and s["w0"]["straggler"])
    ms = [s for s in samples if s and s["w1"]["straggler"]][-1] if on_w1 else samples[-1]
    print(f"  w1 marked in {on_w1} of 10 samples 0.2 s apart, w0 in {on_w0}")
    tables = []
    wait_for(lambda: tables.append(h.ctl(coord.endpoint, "members", "slow")[1]) or
             "<- slowest" in tables[-1], 10, "the table marks the straggler")
    table = tables[-1]
    print("  " + "\n  ".join(table.strip().splitlines()))
    assert on_w1 >= 7 and on_w0 == 0, samples
    # w1's wait is its exposed communication (under TSan measured 29 ms
    # against w0's 40 ms), w0's that plus w1's pacing
    assert 120 <= ms["w0"]["step_ms"] <= 600 and ms["w0"]["wait_ms"] >= 60, ms
    assert ms["w1"]["wait_ms"] < ms["w0"]["wait_ms"], ms
    assert "<- slowest" in table and "rank 1 (w1) is the straggler" in table, table
    for w in ws:
        w.kill9()


def launcher_ends_0(p):
    """Waits for tether-launch `p`, which must exit 0; its output and
    summary line."""
    rc = p.wait(180)
    log = "\n".join(p.lines() + p.lines("log"))
    summary = [l for l in log.splitlines() if "summary:" in l]
    print(f"  launcher exit {rc}; {summary[-1] if summary else 'no summary'}")
    assert rc == 0, log[-3000:]
    return log, summary


def start_drain_job(h, seed, spe, epochs, backend="ring", shards=0, extra=()):
    """Three workers under tether-launch on a known coordinator port (so
    tetherctl can drain one), paced so a drain lands between steps.
    Returns the launcher, the coordinator endpoint, and the parameter and
    metrics files it will write."""
    port = free_port()
    coord = f"tcp://127.0.0.1:{port}"
    out = os.path.join(h.dir, "drain.bin")
    metrics = os.path.join(h.dir, "drain.json")
    argv = launch_argv(3, shards, backend, seed, out,
                       launcher=["--min-workers", "2", "--max-restarts", "2", "--coordinator-port",
                                 str(port), "--daemon-log-level", "info"],
                       train=["--metrics-json", metrics, "--pace-ms", "100", *extra],
                       spe=spe, epochs=epochs)
    return h.spawn("drain", argv, env=FAST), coord, out, metrics


def test_drain_at_a_step_boundary(h):
    """`tetherctl drain JOB WORKER --wait` while three workers train: the
    worker leaves at the next step boundary every member reaches (no step
    fails: nobody reports a failure, nothing is redone), says it was
    drained and exits 0, so tether-launch does not restart it; the other
    two go on in a new generation with the global batch re-sliced, and the
    run ends with the parameters of a fault-free run and exact epoch
    accounting. Then a drain that would leave the job below min_workers is
    refused with the reason."""
    seed, spe, epochs = 3, STEPS_PER_EPOCH, EPOCHS
    p, coord, out, metrics = start_drain_job(h, seed, spe, epochs)
    p.wait_line(lambda l: global_step(l) >= 6, 90, "step 6", stream="log")
    t0 = time.monotonic()
    rc, text, err = h.ctl(coord, "drain", "launch", "worker-1", "--wait", "--timeout-ms",
                          "20000", check=False)
    took = time.monotonic() - t0
    assert rc == 0 and "left job launch" in text, (rc, text, err)
    print(f"  drain: {text.strip()} ({took:.1f} s)")
    rc, _, err = h.ctl(coord, "drain", "launch", "worker-0", check=False)
    assert rc == 1 and "below its min_workers 2" in err, (rc, err)
    print(f"  refused: {err.strip()}")
    log, summary = launcher_ends_0(p)
    assert "worker 'worker-1' was drained from job 'launch'" in log, log[-3000:]
    assert "finished=3 failed=0 restarts=0" in log, summary
    assert "EUNREACHABLE" not in log and "ETIMEDOUT" not in log, log[-3000:]
    # Nobody reports a failure: the survivors say the membership changed
    # at a step boundary, and the drained worker warns of nothing.
    changed = re.findall(r"the membership changed at a step boundary \(3 ranks before", log)
    assert len(changed) == 2 and "step failed" not in log, log[-3000:]
    assert not re.search(r"WARN .*EDRAINED", log), log[-3000:]
    # The survivors' generation is announced as the old one minus
    # worker-1's rank, so NCCL members would shrink their communicator; a
    # ring job builds its ring as before.
    shrink = re.search(r"formed, world 2, .*shrinks generation (\d+) by rank\(s\) 1\b", log)
    assert shrink is not None, [l for l in log.splitlines() if "formed" in l]
    print(f"  announced: generation {int(shrink.group(1)) + 1} shrinks generation "
          f"{shrink.group(1)} by rank 1")
    d = rel_diff(read_params(out), reference(h, seed, spe, epochs))
    print(f"  relative difference to the fault-free run: {d:.2e}")
    assert d < 1e-5, d
    rows = epochs_counted(metrics, spe, epochs)
    assert rows[-1]["world_size"] == 2, rows[-1]


def test_sigterm_leaves_at_a_step_boundary(h):
    """SIGTERM to one of three workers (a pod eviction, a supervisor's
    stop): it asks the coordinator to drain it, leaves at the next step
    boundary (no step fails, nothing is redone) and exits 143, so
    tether-launch restarts it and it joins again (its state broadcast,
    nothing dumped as a failure). The run ends with the parameters of a
    fault-free run. With two workers and min_workers 2 the drain is
    refused: the worker says why and leaves at once."""
    seed, spe, epochs = 4, STEPS_PER_EPOCH, EPOCHS
    p, coord, out, metrics = start_drain_job(h, seed, spe, epochs)
    p.wait_line(lambda l: global_step(l) >= 6, 90, "step 6", stream="log")
    os.kill(launched_pid(p, "worker 1"), signal.SIGTERM)
    log, summary = launcher_ends_0(p)
    assert "tether-train: SIGTERM: leaving the job at the next step boundary" in log, log[-3000:]
    assert "worker 'worker-1' left job 'launch' at a step boundary on SIGTERM" in log, log[-3000:]
    assert "worker 1 exited (exit code 143); restart 1" in log, log[-3000:]
    changed = re.findall(r"the membership changed at a step boundary \(3 ranks before", log)
    assert len(changed) == 2 and "step failed" not in log, log[-3000:]
    assert "no shard servers" not in log and "record(s)" not in log, log[-3000:]
    d = rel_diff(read_params(out), reference(h, seed, spe, epochs))
    print(f"  relative difference to the fault-free run: {d:.2e}")
    assert d < 1e-5, d
    out2 = os.path.join(h.dir, "refused.bin")
    p2 = h.spawn("refused", launch_argv(2, 0, "ring", seed, out2,
                                        launcher=["--max-restarts", "1"],
                                        train=["--pace-ms", "100"], spe=spe, epochs=epochs),
                 env=FAST)
    p2.wait_line(lambda l: global_step(l) >= 3, 90, "step 3", stream="log")
    os.kill(launched_pid(p2, "worker 1"), signal.SIGTERM)
    p2.wait_line(lambda l: "exit code 143" in l, 30, "worker 1 gone", stream="log")
    log = "\n".join(p2.lines() + p2.lines("log"))
    line = [l for l in log.splitlines() if "cannot leave at a step boundary" in l]
    assert line and "below its min_workers 2" in line[0] and "leaving at once" in line[0], log[-3000:]
    print(f"  refused: {line[0].strip()[:200]}")
    assert p2.wait(180) == 0, log[-3000:]


def test_sigterm_to_the_launcher_stops_the_job_at_once(h):
    """SIGTERM to tether-launch (Ctrl-C, or the whole job stopped) reaches
    every worker of a 3-worker job with min_workers 2: one drain is
    accepted, the others would leave too few and are refused, so those
    leave at once; the step of the worker that was to be drained then
    fails, and it leaves at once too instead of waiting --stop-grace-s for
    a boundary that cannot come (it used to hold the stop for 8 s, logging
    ring connection errors)."""
    p, _, _, _ = start_drain_job(h, 5, STEPS_PER_EPOCH, EPOCHS)
    p.wait_line(lambda l: global_step(l) >= 4, 90, "step 4", stream="log")
    t0 = time.monotonic()
    p.signal(signal.SIGTERM)
    rc = p.wait(60)
    took = time.monotonic() - t0
    log = "\n".join(p.lines() + p.lines("log"))
    summary = [l for l in log.splitlines() if "summary:" in l]
    print(f"  launcher exit {rc} {took:.2f} s after its SIGTERM; "
          f"{summary[-1] if summary else 'no summary'}")
    assert rc == 143 and "failed=3" in log, log[-3000:]
    assert "no step boundary within --stop-grace-s" not in log, log[-3000:]
    assert "grace period" not in log and "cannot connect" not in log, log[-3000:]
    left = re.findall(r"\[worker (\d)\] tether-train: SIGTERM: .*leaving at once|"
                      r"\[worker (\d)\] tether-train: worker 'worker-\d' left job 'launch' at a "
                      r"step boundary on SIGTERM", log)
    assert sorted(a or b for a, b in left) == ["0", "1", "2"], (left, log[-3000:])


def job_status(h, coord, job):
    jobs = [j for j in h.ctl_json(coord.endpoint, "status")["jobs"] if j["job_id"] == job]
    assert len(jobs) == 1, jobs
    return jobs[0]


DONE_LINE = "tether-train: job 'finish' has already finished; nothing left to do"


def test_finished_job_refuses_late_worker(h):
    """Two workers complete a 10-step run and leave with "finished"; the
    coordinator marks the job FINISHED instead of waiting for joiners and
    failing it; a third worker started afterwards exits 0 quickly. Then
    `tetherctl forget` drops the record (refused while a run is going on)
    and the same job id trains again from the start."""
    coord = h.coordinator()
    h.shard(coord)
    env = dict(FAST)
    env.update({"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": "finish",
                "TETHER_MIN_WORKERS": "2", "TETHER_MAX_WORKERS": "3"})
    argv = [binary("tether-train"), "--data", DATA, "--backend", "ring",
            *train_args(11, spe=5, epochs=2)]

    def worker(i, extra=()):
        e = dict(env, TETHER_WORKER_ID=f"w{i}", TETHER_ENDPOINT=f"tcp://127.0.0.1:{free_port()}")
        return h.spawn(f"w{i}", [*argv, *extra], env=e)

    ws = [worker(0), worker(1)]
    for w in ws:
        assert w.wait(120) == 0, "\n".join(w.lines("log")[-20:])
    out = "\n".join(ws[0].lines() + ws[1].lines())
    assert "done: test accuracy" in out, out
    assert DONE_LINE not in out, out
    st = job_status(h, coord, "finish")
    print(f"  after the run: {st['state']}, generation {st['generation']}, "
          f"last step {st['last_step']}")
    assert st["state"] == "finished" and st["failure"] == "", st
    assert st["members"] == 0 and st["waiting"] == 0, st

    late = worker(2)
    t0 = time.monotonic()
    rc = late.wait(60)
    took = time.monotonic() - t0
    print(f"  late worker exit {rc} after {took:.1f} s: {late.lines()}")
    assert rc == 0, "\n".join(late.lines() + late.lines("log")[-20:])
    assert late.lines() == [DONE_LINE], late.lines()
    assert took < 20, took  # loading the dataset; the join itself is refused at once

    # A restarted coordinator remembers the job finished.
    coord.signal(signal.SIGTERM)
    assert coord.wait(10) == 0
    coord2 = h.coordinator(port=coord.port, name="coord2")
    st = job_status(h, coord2, "finish")
    assert st["state"] == "finished", st
    again = worker(3)
    assert again.wait(60) == 0, "\n".join(again.lines("log")[-20:])
    assert again.lines() == [DONE_LINE], again.lines()
    text = "\n".join(coord.lines("log") + coord2.lines("log"))
    assert "job failed" not in text, text[-3000:]
    assert "finished: w" in text, text[-3000:]

    # Forgotten, the id starts a new run; a running job is not forgotten.
    rc, out, err = h.ctl(coord2.endpoint, "forget", "nosuch", check=False)
    assert rc == 1 and "unknown job 'nosuch'" in err, (rc, out, err)
    rc, out, err = h.ctl(coord2.endpoint, "forget", "finish", check=False)
    assert rc == 0 and "job finish forgotten" in out, (rc, out, err)
    assert all(j["job_id"] != "finish" for j in h.ctl_json(coord2.endpoint, "status")["jobs"])
    # the forgotten job's last generation survives a restart
    coord2.signal(signal.SIGTERM)
    assert coord2.wait(10) == 0
    coord3 = h.coordinator(port=coord.port, name="coord3")
    ws = [worker(4, ("--pace-ms", "200")), worker(5, ("--pace-ms", "200"))]
    wait_for(lambda: any(j["job_id"] == "finish" and j["state"] == "running"
                         for j in h.ctl_json(coord3.endpoint, "status")["jobs"]), 60,
             "the new run of job finish")
    rc, out, err = h.ctl(coord3.endpoint, "forget", "finish", check=False)
    assert rc == 1 and "only a finished or failed job can be forgotten" in err, (rc, out, err)
    for w in ws:
        assert w.wait(120) == 0, "\n".join(w.lines("log")[-20:])
    out = "\n".join(ws[0].lines() + ws[1].lines())
    assert "done: test accuracy" in out and DONE_LINE not in out, out
    st = job_status(h, coord3, "finish")
    print(f"  forgotten and run again: {st['state']}, generation {st['generation']}, "
          f"last step {st['last_step']}")
    assert st["state"] == "finished" and st["last_step"] == 9, st
    assert st["generation"] == 2, st  # after the forgotten run's generation 1


# The job's own guard rails (JobSettings) over a coordinator whose flags
# would allow 60 regroups an hour and no cool-down.
FLAP_COORD_FLAGS = ("--max-regroups-per-hour", "60", "--flap-cooldown-ms", "0")
FLAP_BOUND = "5 regroups within the last hour exceed max_regroups_per_hour 4"


def flapper(h, coord):
    """start(name, worker_id) -> (tt_testclient process, start time) in job
    "flap": at most 4 regroups an hour, 1 s cool-down doubling."""
    env = {"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": "flap",
           "TETHER_JOB_MAX_REGROUPS_PER_HOUR": "4", "TETHER_JOB_FLAP_COOLDOWN_MS": "1000",
           "TETHER_MIN_WORKERS": "1", "TETHER_MAX_WORKERS": "2", "TETHER_HEARTBEAT_MS": "100",
           "TETHER_HEARTBEAT_TIMEOUT_MS": "1000", "TETHER_LAST_CALL_MS": "300"}
    client = [binary("tt_testclient"), "--run-ms", "60000", "--print"]

    def start(name, wid):
        return h.spawn(name, client, env=dict(env, TETHER_WORKER_ID=wid)), time.monotonic()
    return start


def test_flapping_worker_guard_rails(h):
    """Worker "wb" is replaced by a new process again and again (each join
    evicts the previous incarnation): after its first eviction it comes
    back at once, after the second it waits out a 1 s cool-down, after the
    third a 2 s one, and that admission, the fifth regroup within the hour,
    fails the job (max_regroups_per_hour 4)."""
    coord = h.coordinator(extra=FLAP_COORD_FLAGS)
    start = flapper(h, coord)
    a, _ = start("a", "wa")
    a.wait_line(lambda l: l.startswith("JOINED"), 10, "a joined")
    waits = []
    for i in range(1, 5):  # b1 joins (regroup 1), b2..b4 replace it in turn (2..4)
        b, t0 = start(f"b{i}", "wb")
        line = b.wait_line(lambda l: l.startswith("JOINED"), 15, f"b{i} joined")
        waits.append(time.monotonic() - t0)
        assert parse_kv(line)["world"] == 2, line
    b5, t0 = start("b5", "wb")
    err = b5.wait_line(lambda l: l.startswith("ERROR"), 15, "b5 refused")
    waits.append(time.monotonic() - t0)
    print("  join waits: " + ", ".join(f"{w:.2f} s" for w in waits))
    assert "EJOBFAILED" in err, err
    bound = FLAP_BOUND
    assert bound in err, err
    assert max(waits[:3]) < 1.0, waits  # no eviction yet, then one: no cool-down
    assert 0.8 <= waits[3] < 5, waits  # 1 s after b2's eviction (the second)
    assert 1.6 <= waits[4] < 8, waits  # 2 s after b3's eviction (the third)
    assert a.wait(10) == 1
    assert any("EJOBFAILED" in l and bound in l for l in a.lines()), a.lines()
    st = job_status(h, coord, "flap")
    assert st["state"] == "failed" and bound in st["failure"], st
    assert st["settings"]["max_regroups_per_hour"] == 4, st
    assert st["settings"]["flap_cooldown_ms"] == 1000, st
    text = "\n".join(coord.lines("log"))
    assert "flap cool-down of 1000 ms" in text and "flap cool-down of 2000 ms" in text, text[-3000:]


def test_guard_rails_survive_coordinator_restart(h):
    """The same flapping with the coordinator killed (-9) after the fourth
    regroup and restarted on its state directory: the new instance still
    counts four regroups and three evictions of "wb" within the hour, so
    the next replacement waits out the 2 s cool-down and its admission
    fails the job. A coordinator that forgot them would admit it at once
    and the job would run on."""
    coord = h.coordinator(extra=FLAP_COORD_FLAGS)
    start = flapper(h, coord)
    a, _ = start("a", "wa")
    a.wait_line(lambda l: l.startswith("JOINED"), 10, "a joined")
    for i in range(1, 5):
        b, _ = start(f"b{i}", "wb")
        b.wait_line(lambda l: l.startswith("JOINED"), 15, f"b{i} joined")
    coord.kill9()
    killed = time.monotonic()
    coord2 = h.coordinator(port=coord.port, name="coord2", extra=FLAP_COORD_FLAGS)
    wait_for(lambda: all(m["heartbeat_age_ms"] < 500 for m in
                         h.ctl_json(coord2.endpoint, "members", "flap")["members"]),
             10, "both members heard by the restarted coordinator")
    b5, t0 = start("b5", "wb")
    err = b5.wait_line(lambda l: l.startswith("ERROR"), 15, "b5 refused")
    print(f"  b5 started {t0 - killed:.2f} s after the kill, refused after "
          f"{time.monotonic() - t0:.2f} s")
    assert "EJOBFAILED" in err and FLAP_BOUND in err, err
    assert a.wait(10) == 1
    text = "\n".join(coord2.lines("log"))
    assert "evicted 3 times within the last hour" in text, text[-3000:]
    st = job_status(h, coord2, "flap")
    assert st["state"] == "failed" and FLAP_BOUND in st["failure"], st


if __name__ == "__main__":
    if not have_data():
        print(f"SKIPPED: no Fashion-MNIST at {DATA} (install dataset-fashion-mnist)")
        raise SystemExit(77)
    run_tests([test_kill_random_worker, test_kill_worker_during_ps_steps,
               test_drain_at_a_step_boundary, test_sigterm_leaves_at_a_step_boundary,
               test_sigterm_to_the_launcher_stops_the_job_at_once,
               test_worker_dies_before_first_agreement, test_kill_and_restart,
               test_restarted_worker_pulls_state_from_shards, test_update_on_shards_kill_and_restart,
               test_update_on_shards_kill_after_a_step, test_sigstop_fenced_and_rejoins,
               test_below_min_workers, test_members_show_the_straggler,
               test_finished_job_refuses_late_worker,
               test_flapping_worker_guard_rails, test_guard_rails_survive_coordinator_restart])
