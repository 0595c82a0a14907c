#!/usr/bin/env python3
"""Loss of a daemon during training: real processes through tether-launch,
daemons killed for real with SIGKILL and restarted by the launcher.

  * shard: 3 workers with --backend ps (every step's gradients are summed
    on the shard servers), 2 shards; at a random step (and a random moment
    inside it) the shard server that holds the gradient chunks is killed.
    tether-launch restarts it on the same port; each worker's PS backend
    sees the connection go, sets the job up on the new shard and pushes
    again what it lost (and, when the shard died between answering some
    ranks and the others, the ranks ahead refill that step from their copy
    of its input: worker/tt_ps_recover.c), with no regroup; the job
    completes (launcher exit 0) with exactly one row per epoch of exactly
    the dataset size, no step repeated or skipped, and the parameters of a
    fault-free single-process run within 1e-5 relative;
  * shard dying between answers: the same job, but the shard server dies
    on a test knob (TETHER_SHARD_TEST_DIE) right after answering one rank
    a step, mid-epoch and at an epoch's last step (where the rank ahead
    waits in the metric all-reduce and must refill from there): no timing
    luck needed to reach the refill paths; same checks;
  * coordinator: the same job (ring backend, then ps) loses the coordinator
    in the middle of an epoch; the launcher restarts it, it reloads its
    state file, every worker is heard from again by the new instance
    (tetherctl members), and the job completes with the same checks.

  * shard hung, then a worker killed: a ring job started directly loses
    a worker while its only shard server is stopped (SIGSTOP); the PS
    fallback set-up stuck on that shard ends when the coordinator finds it
    lost and forms the next generation, not at the 60 s deadline, and the
    two survivors finish on the ring with the same checks.

  * shard lost for good: the same job with the coordinator, two shard
    servers and the 3 workers started directly (no launcher to restart
    anything); the shard holding chunks is killed and stays dead. The
    coordinator notices its heartbeats stop, regroups the job with the same
    members, the workers' PS calls stuck on it end at once, the new
    generation's placement uses the survivor only, and the job completes
    with the same checks (each worker exits 0).

The reference runs and the equivalence argument are test_failover.py's
(--lr 0.05, 2 epochs of 20 steps); --pace-ms stretches each step so that
the kill lands mid-run and the restart has steps left to serve.
"""
import json
import os
import random
import re
import signal
import time

from test_failover import DATA, FAST, global_step, have_data, reference, train_args
from tt_harness import binary, free_port, read_params, rel_diff, run_tests

STEPS_PER_EPOCH = 20
EPOCHS = 2
PACE_MS = 100
SEEDS = [int(s) for s in os.environ.get("TETHER_DAEMON_LOSS_SEEDS", "11,12,13").split(",")]
# The shard runs alternate paced steps (the kill lands between rounds, as
# a rule) and unpaced ones (communication is most of a step: the kill
# lands mid-round and the workers re-push what it lost).
SHARD_PACES = [PACE_MS, 0, 0]
COORD_PACE_MS = 150


def launch(h, name, seed, backend, shards, pace_ms=PACE_MS, env=None):
    """Starts tether-launch with 3 workers; returns (proc, dump, metrics)."""
    out = os.path.join(h.dir, f"{name}.bin")
    metrics = os.path.join(h.dir, f"{name}.json")
    argv = [binary("tether-launch"), "--workers", "3", "--shards", str(shards),
            "--min-workers", "3", "--max-restarts", "0", "--daemon-log-level", "info",
            "--", "tether-train", "--data", DATA, "--backend", backend,
            *train_args(seed, STEPS_PER_EPOCH, EPOCHS), "--dump-params", out,
            "--metrics-json", metrics, "--pace-ms", str(pace_ms)]
    return h.spawn(name, argv, env=dict(FAST, **(env or {}))), out, metrics


def launcher_line(p, pattern, timeout=30):
    """The first line on the launcher's stderr matching pattern (waits for
    it), as a match."""
    return re.search(pattern, p.wait_line(lambda l: re.search(pattern, l), timeout,
                                          f"/{pattern}/", stream="log"))


def daemon_pid(p, label):
    return int(launcher_line(p, rf"\[launch\] started {label}: pid (\d+)").group(1))


def coordinator_endpoint(p):
    port = launcher_line(p, r"\[launch\] started coordinator: pid \d+, port (\d+)").group(1)
    return f"tcp://127.0.0.1:{port}"


def wait_step(p, at, timeout=90):
    p.wait_line(lambda l: global_step(l) >= at, timeout, f"step {at}", stream="log")


def current_step(p):
    """The last global step p has logged (0 before the first)."""
    return max([global_step(l) for l in p.lines("log")] + [0])


def check_training(h, name, text, out, metrics, seed, worlds=(3,)):
    """One metrics row per epoch with exact counts and a world size in
    `worlds`, every global step logged once in order (rank 0's log is in
    text), the fault-free parameters. Returns (generations of the rows,
    relative difference)."""
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    assert [r["epoch"] for r in rows] == list(range(1, EPOCHS + 1)), rows
    assert [r["step"] for r in rows] == [STEPS_PER_EPOCH * e for e in range(1, EPOCHS + 1)], rows
    assert all(r["examples"] == STEPS_PER_EPOCH * 256 for r in rows), rows
    assert all(r["world_size"] in worlds for r in rows), rows
    # rank 0 logs every step once (--log-every 1): a repeated or skipped
    # step shows up as a gap or a repetition in this sequence
    steps = [global_step(l) for l in text.splitlines() if global_step(l) >= 0]
    assert steps == list(range(1, STEPS_PER_EPOCH * EPOCHS + 1)), steps
    d = rel_diff(read_params(out), reference(h, seed, STEPS_PER_EPOCH, EPOCHS))
    assert d < 1e-5, f"{name}: parameters differ by {d:.2e} (limit 1e-5)"
    return [r["generation"] for r in rows], d


def check_result(h, name, p, rc, out, metrics, seed):
    """Exit 0, the summary, and check_training's checks."""
    text = "\n".join(p.lines() + p.lines("log"))
    summary = [l for l in text.splitlines() if "summary:" in l]
    assert rc == 0, f"launcher exit {rc}:\n" + text[-4000:]
    assert summary and "finished=3 failed=0 restarts=0 daemon-restarts=1" in summary[-1], \
        summary[-1] if summary else text[-4000:]
    gens, d = check_training(h, name, text, out, metrics, seed)
    print(f"  {name}: {summary[-1].split('summary: ')[-1]}; generations {gens}; relative "
          f"difference to the fault-free run {d:.2e}")
    return text


def shard_table(h, ep):
    """tetherctl shards --json, or None while it does not answer."""
    rc, out, _ = h.ctl(ep, "shards", "--json", check=False)
    return json.loads(out)["shards"] if rc == 0 else None


def chunk_holders(h, ep):
    """Ids of the shards whose heartbeats report chunks of the job."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        held = [s["shard_id"] for s in shard_table(h, ep) or [] if s["chunks"] > 0]
        if held:
            return held
        time.sleep(0.1)
    raise AssertionError("no shard reported holding chunks")


PLACED_RE = re.compile(r"^\[shard (\d+)\] .*: placement version \d+, (\d+) chunks")


def placed_shards(p, timeout=30):
    """Ids of the shards that logged taking chunks of the job. The shards'
    own lines (through the launcher) say it as the job is set up, where the
    coordinator's table waits for a heartbeat: an unpaced job of 40 steps
    can be over before that (half a second)."""
    def held(line):
        m = PLACED_RE.search(line)
        return int(m.group(1)) if m and int(m.group(2)) > 0 else None
    p.wait_line(lambda l: held(l) is not None, timeout, "a shard taking chunks", stream="log")
    return sorted({held(l) for l in p.lines("log")} - {None})


def test_kill_shard_during_ps_steps(h):
    for k, seed in enumerate(SEEDS):
        rng = random.Random(seed)
        pace = SHARD_PACES[k % len(SHARD_PACES)]
        at = rng.randrange(3, STEPS_PER_EPOCH * EPOCHS - 8)
        name = f"shard-{seed}"
        p, out, metrics = launch(h, name, seed, "ps", shards=2, pace_ms=pace)
        wait_step(p, 2)
        victim = rng.choice(placed_shards(p))
        # a step the job has passed would make the kill land after the fact
        at = max(at, current_step(p) + 2)
        assert at < STEPS_PER_EPOCH * EPOCHS - 2, \
            f"{name}: the job reached step {at - 2} before its chunk holder was known"
        wait_step(p, at)
        time.sleep(rng.uniform(0, max(pace, 20) / 1000))  # anywhere inside the step
        pid = daemon_pid(p, f"shard {victim}")
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        rc = p.wait(120)
        log = p.lines("log")
        lost = [l for l in log if f"connection to shard s{victim} lost" in l]
        resent = sum(int(re.search(r"; (\d+) request", l).group(1)) for l in lost)
        refills = sum("contributing to it again" in l for l in log)
        print(f"  seed {seed} (pace {pace} ms): killed shard {victim} (pid {pid}) at step >= {at}; "
              f"{time.monotonic() - killed:.1f} s to the end; requests sent again {resent}, "
              f"refills {refills}")
        text = check_result(h, name, p, rc, out, metrics, seed)
        assert f"[launch] shard {victim} died (killed by signal 9" in text, text[-4000:]
        # every worker's PS backend noticed the loss itself (no regroup)
        assert len(lost) == 3, "not every worker saw the shard go:\n" + text[-4000:]
        # the restarted shard was set up again by the workers and served
        setups = [l for l in text.splitlines()
                  if l.startswith(f"[shard {victim}]") and "job launch: placement version" in l]
        assert len(setups) >= 2, "the restarted shard never served the job:\n" + text[-4000:]


def test_shard_dies_between_answers(h):
    """The shard dies right after answering one rank a step (the shard's
    test knob, not a timed kill), and the launcher restarts it. The ranks
    behind push that step again to the restarted shard and wait there for
    the rank ahead to contribute again from its copy of its input:
      * mid-epoch, the rank ahead learns of it from its next push (the
        shard answers that the step before is still open);
      * at an epoch's last step, the rank ahead goes on to the epoch's
        metric all-reduce instead, and must refill while it waits in the
        ring (tt_ps_tend), or both sides wait for each other.
    Either way the job completes exactly, with no regroup."""
    for k, (step, refill) in enumerate([(STEPS_PER_EPOCH // 2, "contributing to it again"),
                                        (STEPS_PER_EPOCH, "is back between calls")]):
        seed, name = SEEDS[0] + 40 + k, f"between-{step}"
        marker = os.path.join(h.dir, f"{name}.died")
        # PS steps count from 0: global step `step` is PS step step - 1
        knob = {"TETHER_SHARD_TEST_DIE": f"{step - 1}:{marker}"}
        p, out, metrics = launch(h, name, seed, "ps", shards=2, pace_ms=0, env=knob)
        rc = p.wait(120)
        lines = p.lines() + p.lines("log")
        text = "\n".join(lines)
        died = [l.split("] ", 1)[-1] for l in lines if "test knob: answered one rank" in l]
        refills = sum(refill in l for l in lines)
        print(f"  step {step}: {died[0] if died else 'the knob never fired'}; "
              f"'{refill}': {refills} line(s)")
        assert os.path.exists(marker) and died, "the knob never fired:\n" + text[-4000:]
        check_result(h, name, p, rc, out, metrics, seed)
        assert refills >= 1, f"no rank contributed again ('{refill}'):\n" + text[-4000:]
        with open(metrics) as f:
            gens = {json.loads(line)["generation"] for line in f if line.strip()}
        assert len(gens) == 1, f"the job regrouped (generations {sorted(gens)}):\n" + text[-4000:]


def direct_job(h, job, seed, backend, shard_ids, min_workers):
    """A coordinator, these shard servers and 3 workers of `job` started
    directly: no launcher restarts anything. Returns (coordinator, shards
    by id, workers, dump path, metrics path)."""
    coord = h.coordinator(extra=("--shard-timeout-ms", "1500"))  # shards beat every 200 ms
    shards = {sid: h.shard(coord, sid) for sid in shard_ids}
    out, metrics = os.path.join(h.dir, f"{job}.bin"), os.path.join(h.dir, f"{job}.json")
    # a collective deadline far beyond the coordinator's shard timeout (5 s):
    # only the regroup can end the waits stuck on a lost shard in time
    env = dict(FAST, TETHER_COORDINATOR=coord.endpoint, TETHER_JOB=job,
               TETHER_MIN_WORKERS=str(min_workers), TETHER_MAX_WORKERS="3",
               TETHER_COLL_DEADLINE_MS="60000")
    argv = [binary("tether-train"), "--data", DATA, "--backend", backend,
            *train_args(seed, STEPS_PER_EPOCH, EPOCHS), "--dump-params", out,
            "--metrics-json", metrics, "--pace-ms", str(PACE_MS)]
    ws = [h.spawn(f"w{i}", argv, env=dict(env, TETHER_WORKER_ID=f"w{i}",
                                           TETHER_ENDPOINT=f"tcp://127.0.0.1:{free_port()}"))
          for i in range(3)]  # w0 is rank 0: it logs every step
    return coord, shards, ws, out, metrics


def test_shard_lost_for_good(h):
    """A shard server killed for good (no launcher to restart it): the
    coordinator sees its heartbeats stop, regroups the job with the same
    members, every worker's PS call in flight ends at once (tt_ps_interrupt)
    instead of at its deadline, the new generation's placement puts every
    chunk on the surviving shard, and the run completes exactly."""
    seed = SEEDS[0] + 30
    rng = random.Random(seed)
    coord, shards, ws, out, metrics = direct_job(h, "lost", seed, "ps", ("s0", "s1"), 3)
    at = rng.randrange(3, STEPS_PER_EPOCH * EPOCHS - 15)
    wait_step(ws[0], 2)
    victim = rng.choice(chunk_holders(h, coord.endpoint))
    wait_step(ws[0], at)
    shards[victim].kill9()
    killed = time.monotonic()
    rcs = [w.wait(120) for w in ws]
    took = time.monotonic() - killed
    texts = ["\n".join(w.lines() + w.lines("log")) for w in ws]
    for w, rc, text in zip(ws, rcs, texts):
        assert rc == 0, f"{w.name} exit {rc}:\n" + text[-4000:]
    clog = "\n".join(coord.lines("log"))
    assert f"job lost: shard {victim} lost; regrouping to re-place its chunks" in clog, clog[-4000:]
    interrupted = sum("ended while rank" in t for t in texts)
    gens, d = check_training(h, "lost", texts[0], out, metrics, seed)
    print(f"  killed shard {victim} at step >= {at}; {took:.1f} s to the end; {interrupted} "
          f"PS call(s) interrupted; generations {gens}; relative difference {d:.2e}")
    assert gens[-1] >= 2, gens
    assert interrupted >= 1, "no PS call was ended by the new generation:\n" + texts[0][-4000:]
    # the dead shard holds nothing any more; the survivor holds every chunk
    table = {s["shard_id"]: s for s in shard_table(h, coord.endpoint)}
    assert not table[victim]["alive"], table
    survivor = "s1" if victim == "s0" else "s0"
    assert any(f"job lost: placement version {v}" in l for l in shards[survivor].lines("log")
               for v in range(2, 10)), "the survivor never got the new placement"


def test_shard_hangs_then_worker_dies(h):
    """A shard server that hangs (SIGSTOP: its port still takes TCP
    connections, nothing answers) and then a worker killed (-9), in a ring
    job started without a launcher. The survivors' next generation opens
    its PS fallback on the hung shard; the coordinator then finds the
    shard lost and forms another generation. The set-up stuck on the hung
    shard must end with that generation, not at the collective deadline
    (60 s here, as in production), which once cost two minutes and an
    evicted worker. The survivors resume on the ring (the new generation
    has no live shard) and finish the run exactly."""
    seed = SEEDS[0] + 40
    coord, shards, ws, out, metrics = direct_job(h, "hung", seed, "ring", ("s0",), 2)
    shard = shards["s0"]
    at = random.Random(seed).randrange(3, STEPS_PER_EPOCH * EPOCHS - 20)
    wait_step(ws[0], at)
    shard.signal(signal.SIGSTOP)
    ws[2].kill9()
    killed = time.monotonic()
    try:
        rcs = [w.wait(150) for w in ws[:2]]
    finally:
        shard.signal(signal.SIGCONT)
    took = time.monotonic() - killed
    texts = ["\n".join(w.lines() + w.lines("log")) for w in ws[:2]]
    for w, rc, text in zip(ws, rcs, texts):
        assert rc == 0, f"{w.name} exit {rc}:\n" + text[-4000:]
    clog = "\n".join(coord.lines("log"))
    assert "job hung: shard s0 lost" in clog, clog[-4000:]
    cut = [l for t in texts for l in t.splitlines() if "ended while" in l and
           ("waited for" in l or "placement" in l)]
    waited = [l for t in texts for l in t.splitlines() if "unanswered after" in l]
    gens, d = check_training(h, "hung", texts[0], out, metrics, seed, worlds=(2, 3))
    print(f"  shard stopped and w2 killed at step >= {at}; {took:.1f} s to the end; "
          f"{len(cut)} shard wait(s) ended by the next generation; generations {gens}; "
          f"relative difference {d:.2e}")
    assert not waited, "a wait on the hung shard ran to its deadline:\n" + waited[0]
    assert cut, "no wait on the hung shard was ended by the generation:\n" + texts[0][-4000:]
    assert gens[-1] >= 3, gens


def test_coordinator_restart_after_shard_loss(h):
    """Placement versions survive a coordinator restart. A shard is lost
    for good (placement version 2 on the survivor), then the coordinator is
    killed (-9) and restarted on its state, then a worker is killed: the
    next generation's placement must not go back to version 1, which the
    surviving shard, set up at version 2, would refuse as stale (ESTALE),
    leaving the survivors without a PS backend. The two survivors finish
    the run exactly."""
    seed, epochs = SEEDS[0] + 40, 4
    coord_flags = ("--shard-timeout-ms", "1500")
    coord = h.coordinator(extra=coord_flags)
    shards = {sid: h.shard(coord, sid) for sid in ("s0", "s1")}
    out, metrics = os.path.join(h.dir, "again.bin"), os.path.join(h.dir, "again.json")
    env = dict(FAST, TETHER_COORDINATOR=coord.endpoint, TETHER_JOB="again",
               TETHER_MIN_WORKERS="2", TETHER_MAX_WORKERS="3")
    argv = [binary("tether-train"), "--data", DATA, "--backend", "ps",
            *train_args(seed, STEPS_PER_EPOCH, epochs), "--dump-params", out,
            "--metrics-json", metrics, "--pace-ms", str(PACE_MS)]
    ws = [h.spawn(f"w{i}", argv, env=dict(env, TETHER_WORKER_ID=f"w{i}",
                                           TETHER_ENDPOINT=f"tcp://127.0.0.1:{free_port()}"))
          for i in range(3)]
    wait_step(ws[0], 3)
    victim = chunk_holders(h, coord.endpoint)[0]
    shards[victim].kill9()
    survivor = "s1" if victim == "s0" else "s0"
    shards[survivor].wait_line(lambda l: "job again: placement version 2" in l, 20,
                               "placement version 2 on the surviving shard", stream="log")
    coord.kill9()
    coord = h.coordinator(port=coord.port, name="coord2", extra=coord_flags)
    at = current_step(ws[0]) + 3
    wait_step(ws[0], at)
    ws[2].kill9()
    rcs = [w.wait(120) for w in ws[:2]]
    texts = ["\n".join(w.lines() + w.lines("log")) for w in ws[:2]]
    for w, rc, text in zip(ws, rcs, texts):
        assert rc == 0, f"{w.name} exit {rc}:\n" + text[-4000:]
    assert not any("placement version is older" in t for t in texts), texts[0][-4000:]
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    assert [r["examples"] for r in rows] == [STEPS_PER_EPOCH * 256] * epochs, rows
    assert rows[-1]["world_size"] == 2, rows
    versions = [int(m.group(1)) for l in shards[survivor].lines("log")
                for m in [re.search(r"job again: placement version (\d+)", l)] if m]
    d = rel_diff(read_params(out), reference(h, seed, STEPS_PER_EPOCH, epochs))
    print(f"  shard {victim} lost, coordinator restarted, w2 killed at step >= {at}; "
          f"placement versions on {survivor}: {versions}; relative difference {d:.2e}")
    assert versions == sorted(versions) and versions[-1] > 2, versions
    assert d < 1e-5, d


def members(h, ep):
    rc, out, _ = h.ctl(ep, "members", "launch", "--json", check=False, timeout_ms=500)
    return json.loads(out)["members"] if rc == 0 else None


def run_coordinator_kill(h, seed, backend):
    rng = random.Random(seed)
    # mid-epoch (neither its first nor its last steps), with at least a
    # second of steps left for the members to be seen by the new instance
    epoch = rng.randrange(EPOCHS)
    at = epoch * STEPS_PER_EPOCH + rng.randrange(3, STEPS_PER_EPOCH - 8)
    name = f"coord-{backend}-{seed}"
    p, out, metrics = launch(h, name, seed, backend, shards=1, pace_ms=COORD_PACE_MS)
    ep = coordinator_endpoint(p)
    wait_step(p, at)
    time.sleep(rng.uniform(0, COORD_PACE_MS / 1000))
    pid = daemon_pid(p, "coordinator")
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    done = current_step(p)  # steps logged before the kill
    # every member is heard from by the new instance: its heartbeats carry
    # a completed step after the kill (the saved record can only hold an
    # earlier one)
    seen, deadline = None, time.monotonic() + 15
    while time.monotonic() < deadline and p.alive():
        ms = members(h, ep)
        if ms and len(ms) == 3 and all(m["last_step"] > done and m["heartbeat_age_ms"] < 1000
                                       for m in ms):
            seen = time.monotonic() - killed
            break
        time.sleep(0.05)
    rc = p.wait(120)
    print(f"  {backend} seed {seed}: killed the coordinator (pid {pid}) at step >= {at}; all "
          f"members re-registered after {seen if seen is None else f'{seen:.2f} s'}")
    text = check_result(h, name, p, rc, out, metrics, seed)
    assert "[launch] coordinator died (killed by signal 9" in text, text[-4000:]
    assert re.search(r"\[coord\].*restored job launch at generation \d+", text), text[-4000:]
    assert seen is not None, "the restarted coordinator did not hear from every worker"


def test_kill_coordinator_mid_epoch(h):
    run_coordinator_kill(h, SEEDS[0] + 20, "ring")
    run_coordinator_kill(h, SEEDS[0] + 21, "ps")


if __name__ == "__main__":
    if not have_data():
        print(f"SKIPPED: no Fashion-MNIST at {DATA} (install dataset-fashion-mnist)")
        raise SystemExit(77)
    run_tests([test_coordinator_restart_after_shard_loss, test_kill_shard_during_ps_steps,
               test_shard_dies_between_answers, test_kill_coordinator_mid_epoch,
               test_shard_lost_for_good, test_shard_hangs_then_worker_dies])
