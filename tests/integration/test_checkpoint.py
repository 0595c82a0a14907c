#!/usr/bin/env python3
"""Trainer-side checkpoints end to end (worker/train/tt_train_ckpt, docs/
checkpoints.md): tether-train under tether-launch (ring backend, daemons'
state under --state-dir), checkpoints in the test's temp dir.

  * resume equivalence: 2N steps straight versus N steps, stop everything,
    --resume auto, N more -> parameters equal within 1e-6 relative;
  * reshard: saved by 4 workers, resumed by 2 and by 3 (AdamW, so three
    state planes) -> same parameters as an uninterrupted run within 1e-5;
  * the same with the PS backend (aggregate mode): 4 workers + 2 shards
    save, 2 workers + 3 shards resume;
  * kill -9 of a writer while it writes (TETHER_CKPT_TEST_STALL_STEP hangs
    the part writers from that step on) -> that checkpoint never commits, the
    previous one verifies, and --resume auto continues from it exactly;
  * one flipped byte in a part -> `tetherctl checkpoint verify` and
    --resume auto refuse naming the part; --resume latest-valid loads the
    previous checkpoint and continues exactly;
  * every worker killed at once and restarted by tether-launch, without
    --resume (the default, --resume job): they go on from the job's newest
    committed checkpoint, on the ring and with the update on the shards
    (whose state they put back), and end with the uninterrupted run's
    parameters.

Small model and subset (784,64,10 on 2000 examples, batch 64) so the whole
file runs in well under a minute on two cores; --lr 0.05 for the reason
test_train.py gives.
"""
import json
import os
import re
import signal
import subprocess
import time

from tt_harness import (binary, committed, launched_pid, read_params, rel_diff,
                        run_tests, verify_checkpoint, wait_for)

DATA = os.environ.get("TETHER_FMNIST", "/usr/share/datasets/fashion-mnist")
BASE = ["--layers", "784,64,10", "--train-limit", "2000", "--batch", "64", "--lr", "0.05",
        "--log-every", "0", "--seed", "7", "--epochs", "2", "--data", DATA]


def have_data():
    return os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz"))


def spawn(h, name, workers, args, env=None, restarts=3, shards=0, launch_args=()):
    state = os.path.join(h.dir, "state-" + name)
    backend = "ps" if shards else "ring"
    argv = [binary("tether-launch"), "--workers", str(workers), "--shards", str(shards),
            "--state-dir", state, "--max-restarts", str(restarts), *launch_args, "--",
            "tether-train",
            "--backend", backend, *BASE, *args]
    full = {"PATH": os.path.dirname(binary("tether-train")) + ":" + os.environ["PATH"]}
    full.update(env or {})
    return h.spawn(name, argv, env=full)


def launch(h, name, workers, args, env=None, expect=0, shards=0):
    p = spawn(h, name, workers, args, env, shards=shards)
    rc = p.wait(180)
    assert rc == expect, f"{name}: tether-launch exited {rc}, expected {expect}"
    return p


def straight(h, steps, workers=2, extra=(), shards=0):
    name = f"straight-{steps}-w{workers}-s{shards}-{len(extra)}"
    out = os.path.join(h.dir, f"{name}.bin")
    launch(h, name, workers, ["--max-steps", str(steps), "--dump-params", out, *extra],
           shards=shards)
    return read_params(out)


def ckdir(h):
    return os.path.join(h.dir, "ckpt")


def log_text(p):
    return "\n".join(p.lines("log") + p.lines("out"))


def test_resume_equivalence(h):
    # 20 + 20 steps crosses the end of epoch 1 (32 steps of 64 out of 2000).
    ref = straight(h, 40)
    root = ckdir(h)
    launch(h, "first", 2, ["--max-steps", "20", "--checkpoint-dir", root,
                           "--checkpoint-every-steps", "10"])
    assert committed(root) == ["step-000000010", "step-000000020"], os.listdir(root)
    with open(os.path.join(root, "latest")) as f:
        assert f.read().strip() == "step-000000020"
    out = os.path.join(h.dir, "resumed.bin")
    p = launch(h, "resumed", 2, ["--max-steps", "40", "--checkpoint-dir", root,
                                 "--resume", "auto", "--dump-params", out,
                                 "--checkpoint-every-steps", "10", "--checkpoint-keep", "2"])
    assert "over 40 steps" in log_text(p), "resumed run did not end at step 40"
    said = [l for l in p.lines("out") if "resumed from checkpoint" in l]
    assert said == ["[worker 0] resumed from checkpoint step-000000020 (--resume auto): "
                    "global step 20, epoch 1 at step 20"], said
    d = rel_diff(read_params(out), ref)
    print(f"  resume equivalence after 20+20 steps: relative difference {d:.2e}")
    assert d < 1e-6, f"resumed parameters differ by {d:.2e} (limit 1e-6)"
    # Retention: the resumed run committed 30 and 40 and kept the newest two.
    assert committed(root) == ["step-000000030", "step-000000040"], os.listdir(root)
    assert sorted(os.listdir(root)) == ["latest", "step-000000030", "step-000000040"]
    r = subprocess.run([binary("tetherctl"), "checkpoints", root, "--json"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [(c["id"], c["step"], c["latest"]) for c in listed] == \
        [("step-000000030", 30, False), ("step-000000040", 40, True)], listed
    assert all(c["bytes"] > 0 and c["duration_ms"] >= 0 for c in listed), listed
    r = subprocess.run([binary("tetherctl"), "checkpoints", root + "/"], capture_output=True,
                       text=True, timeout=30)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and "2 committed checkpoints; latest names step-000000040" in lines[0]
    assert lines[1].split()[:5] == ["ID", "STEP", "BYTES", "CREATED", "(UTC)"], lines
    assert lines[3].split()[0] == "step-000000040" and lines[3].rstrip().endswith("*"), lines
    # A mistyped root is an error, not an empty list.
    r = subprocess.run([binary("tetherctl"), "checkpoints", root + "-typo/"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and "No such file or directory" in r.stderr, (r.returncode, r.stderr)


def test_reshard(h):
    extra = ["--optimizer", "adamw", "--lr", "0.002"]
    ref = straight(h, 20, workers=4, extra=extra)
    root = ckdir(h)
    launch(h, "save-w4", 4, ["--max-steps", "10", "--checkpoint-dir", root,
                             "--checkpoint-every-steps", "10", *extra])
    rc, text = verify_checkpoint(os.path.join(root, "step-000000010"))
    assert rc == 0 and "shard-3.bin" in text, text
    for w in (2, 3):
        out = os.path.join(h.dir, f"resume-w{w}.bin")
        launch(h, f"resume-w{w}", w, ["--max-steps", "20", "--checkpoint-dir", root,
                                      "--resume", "auto", "--dump-params", out, *extra])
        d = rel_diff(read_params(out), ref)
        print(f"  saved by 4 workers, resumed by {w}: relative difference {d:.2e}")
        assert d < 1e-5, f"W=4 -> W={w}: parameters differ by {d:.2e} (limit 1e-5)"


def test_reshard_ps(h):
    # The PS backend in aggregate mode: the shard servers only sum
    # gradients, so the state is the workers' and the same checkpoints apply;
    # 4 workers + 2 shards save, 2 workers + 3 shards resume.
    ref = straight(h, 20, workers=4)
    root = ckdir(h)
    launch(h, "ps-save", 4, ["--max-steps", "10", "--checkpoint-dir", root,
                             "--checkpoint-every-steps", "10"], shards=2)
    out = os.path.join(h.dir, "ps-resume.bin")
    launch(h, "ps-resume", 2, ["--max-steps", "20", "--checkpoint-dir", root, "--resume", "auto",
                               "--dump-params", out], shards=3)
    d = rel_diff(read_params(out), ref)
    print(f"  PS: saved by 4 workers + 2 shards, resumed by 2 + 3: relative difference {d:.2e}")
    assert d < 1e-5, f"parameters differ by {d:.2e} (limit 1e-5)"


SHARDS = ["--update", "shards"]


def test_update_on_shards_resume(h):
    """The shard servers apply the optimizer and write the state planes
    themselves (ps-<k>.bin); rank 0 writes only trainer.bin. Resumed by the
    same world: bitwise the uninterrupted run (deterministic sums); with
    AdamW (three planes and the step counter) saved by 4 workers + 2 shards
    and resumed by 2 + 3: within 1e-5 of the uninterrupted 4 + 2 run."""
    ref = straight(h, 40, extra=SHARDS, shards=2)
    root = os.path.join(h.dir, "ck-shards")
    launch(h, "shards-first", 2, ["--max-steps", "20", "--checkpoint-dir", root,
                                  "--checkpoint-every-steps", "10", *SHARDS], shards=2)
    assert committed(root) == ["step-000000010", "step-000000020"], os.listdir(root)
    rc, text = verify_checkpoint(os.path.join(root, "step-000000020"))
    assert rc == 0 and "ps-0.bin" in text and "ps-1.bin" in text and "trainer.bin" in text, text
    assert "shard-0.bin" not in text, text  # the workers wrote no state planes
    out = os.path.join(h.dir, "shards-resumed.bin")
    launch(h, "shards-resumed", 2, ["--max-steps", "40", "--checkpoint-dir", root,
                                    "--resume", "auto", "--dump-params", out, *SHARDS], shards=2)
    d = rel_diff(read_params(out), ref)
    print(f"  update on the shards, 20 + 20 steps, same world: relative difference {d:.2e}")
    assert d == 0.0, f"resumed parameters differ by {d:.2e} (bitwise expected)"
    adamw = [*SHARDS, "--optimizer", "adamw", "--lr", "0.002"]
    ref = straight(h, 20, workers=4, extra=adamw, shards=2)
    root = os.path.join(h.dir, "ck-shards-adamw")
    launch(h, "adamw-save", 4, ["--max-steps", "10", "--checkpoint-dir", root,
                                "--checkpoint-every-steps", "10", *adamw], shards=2)
    out = os.path.join(h.dir, "adamw-resumed.bin")
    launch(h, "adamw-resumed", 2, ["--max-steps", "20", "--checkpoint-dir", root,
                                   "--resume", "auto", "--dump-params", out, *adamw], shards=3)
    d = rel_diff(read_params(out), ref)
    print(f"  AdamW on the shards, saved by 4 + 2, resumed by 2 + 3: relative difference {d:.2e}")
    assert d < 1e-5, f"parameters differ by {d:.2e} (limit 1e-5)"


def launcher_coordinator(p):
    for line in p.lines() + p.lines("log"):
        m = re.search(r"started coordinator: pid \d+, port (\d+)", line)
        if m:
            return f"tcp://127.0.0.1:{m.group(1)}"
    return None


def job_status(h, p, job="launch", text=False):
    """The job's entry of `tetherctl status --json` from the launcher's
    coordinator (None when it does not answer), or the plain text."""
    coord = launcher_coordinator(p)
    if coord is None:
        return None
    rc, out, _ = h.ctl(coord, "status", *([] if text else ["--json"]), check=False)
    if rc != 0:
        return None
    if text:
        return out
    return ([j for j in json.loads(out)["jobs"] if j["job_id"] == job] or [None])[0]


def job_step(h, p, job="launch"):
    """The job's last step as the launcher's coordinator reports it."""
    st = job_status(h, p, job)
    return st["last_step"] if st is not None else -1


def redone(text):
    """rank 0's lines saying a generation resumed behind the job's steps:
    (steps the job had completed, resume step, steps trained again)."""
    return [tuple(int(x) for x in m) for m in re.findall(
        r"the job had completed at least (\d+) step\(s\); generation \d+ resumes at step "
        r"(\d+): at least (\d+) are trained again", text)]


def check_redone(text, known, at):
    """The job had completed at least `known` steps (the coordinator said
    so before the kill) and resumed from the checkpoint of step `at`: when
    that is behind, rank 0 must say how far, with consistent figures (a
    checkpoint that committed after the query may leave nothing to say)."""
    again = redone(text)
    assert all(a[1] == at and a[2] == a[0] - a[1] for a in again), (again, at)
    if known > at:
        assert again and again[-1][0] >= known, (again, known, at, text[-3000:])
    return again


def fleet_restart(h, name, extra=(), shards=0):
    """Both workers of a running job killed at once; tether-launch starts
    them again with the same arguments. Rank 0 of the new generation says
    how many steps the checkpoint set the job back."""
    ref = straight(h, 60, extra=extra, shards=shards)
    root = os.path.join(h.dir, "ck-" + name)
    out = os.path.join(h.dir, name + ".bin")
    # paced so that the kill comes well before the end (step 20 is at 1 s)
    p = spawn(h, name, 2, ["--max-steps", "60", "--checkpoint-dir", root, "--pace-ms", "50",
                           "--checkpoint-every-steps", "10", "--dump-params", out, *extra],
              restarts=2, shards=shards)
    wait_for(lambda: "step-000000020" in committed(root), 60, "checkpoint step 20 committed")
    wait_for(lambda: job_step(h, p) >= 24, 60, "the coordinator at step 24")
    pids = [launched_pid(p, f"worker {i}") for i in range(2)]
    known = job_step(h, p) + 1
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    rc = p.wait(180)
    text = log_text(p)
    resumed = re.findall(r"resumed from checkpoint (step-\d+) \(step (\d+)", text)
    print(f"  {name}: killed both workers after step-000000020 committed, the coordinator "
          f"knowing {known} steps; launcher exit {rc}; resumed from "
          f"{sorted(set(r[0] for r in resumed))}; (done, resumed at, again) {redone(text)}")
    assert rc == 0 and "finished=2" in text, text[-3000:]
    assert len(resumed) == 2 and resumed[0] == resumed[1], text[-3000:]
    assert "the newest the coordinator recorded for this job" in text, text[-3000:]
    assert len(redone(text)) <= 1, redone(text)
    check_redone(text, known, int(resumed[0][1]))
    d = rel_diff(read_params(out), ref)
    print(f"  {name}: relative difference to the uninterrupted run {d:.2e}")
    assert d == 0.0, f"parameters differ by {d:.2e} (bitwise expected)"


def test_all_workers_restart_resume_the_job(h):
    fleet_restart(h, "fleet-ring")


def test_all_workers_restart_update_on_shards(h):
    """The shards still hold the state of the step the workers died in;
    the restarted workers put the checkpoint's back (before, they put
    their fresh initial state there and the job started over)."""
    fleet_restart(h, "fleet-shards", extra=SHARDS, shards=2)


def test_all_workers_restart_without_checkpoints_say_so(h):
    """Without checkpoints a job whose every worker died has no state left:
    the restarted workers train from step 0, and rank 0 says how many
    steps that throws away instead of starting over in silence. Meanwhile
    `tetherctl status` shows where the new generation is, not the old
    high step frozen (a job that looked stalled), and says steps are
    trained again."""
    out = os.path.join(h.dir, "over.bin")
    # Paced so that the redo (steps 0 to the kill, over 2 s) outlasts a few
    # status polls even under TSan, where each tetherctl call is slow.
    p = spawn(h, "over", 2, ["--max-steps", "60", "--pace-ms", "80", "--dump-params", out],
              env={"TETHER_HEARTBEAT_MS": "200"}, restarts=2)
    wait_for(lambda: job_step(h, p) >= 20, 60, "the coordinator at step 20")
    before = job_status(h, p)
    for pid in [launched_pid(p, f"worker {i}") for i in range(2)]:
        os.kill(pid, signal.SIGKILL)
    seen = {}

    def progress(st):
        return (st["epoch"], st["epoch_examples"])

    # Epoch progress went back: (epoch, examples) compared as a pair, since
    # `before` may be read just past the end of epoch 1 (32 steps), where
    # the examples alone are lower than anything the redo reports. Epoch 0
    # is no report yet: the new generation's own heartbeats must say it.
    def redoing():
        st = job_status(h, p)
        if st is not None and 0 <= st["last_step"] < st["reached_step"] and \
                st["epoch"] >= 1 and progress(st) < progress(before):
            seen["json"], seen["text"] = st, job_status(h, p, text=True)
            return True
        return False

    wait_for(redoing, 60, "status showing the new generation behind the old step")
    rc = p.wait(180)
    text = log_text(p)
    over = [int(n) for n in re.findall(
        r"the job had completed at least (\d+) step\(s\), but no member holds its state and no "
        r"checkpoint was resumed: training starts over at step 0", text)]
    st = seen["json"]
    print(f"  start-over: launcher exit {rc}; steps thrown away {over}; status during the redo: "
          f"last step {st['last_step']} of {st['reached_step']}, (epoch, examples) "
          f"{progress(st)} (before the kill {progress(before)})")
    assert rc == 0 and "finished=2" in text, text[-3000:]
    assert len(over) == 1 and over[0] >= 21, (over, text[-3000:])
    assert not redone(text) and os.path.exists(out), text[-3000:]
    assert st["reached_step"] >= before["last_step"], (st, before)
    assert "trains steps again: its members are at step" in (seen["text"] or ""), seen["text"]


def test_worker_rejoins_a_checkpointing_job(h):
    """A worker killed and restarted while the job checkpoints rejoins at
    a step boundary (min 1 worker, so the survivor goes on alone first).
    The checkpoint hook runs first after each step, and it used to swallow
    the regroup: it disabled checkpoints and let the next step's collective
    run while the joiner waited in the state agreement (a hang until the
    deadline, or a desync that ended the survivor)."""
    ref = straight(h, 60)
    root = os.path.join(h.dir, "ck-rejoin")
    out = os.path.join(h.dir, "rejoin.bin")
    p = spawn(h, "rejoin", 2, ["--max-steps", "60", "--checkpoint-dir", root, "--pace-ms", "80",
                               "--checkpoint-every-steps", "10", "--dump-params", out],
              restarts=1, launch_args=["--min-workers", "1"])
    wait_for(lambda: "step-000000010" in committed(root), 60, "checkpoint step 10 committed")
    os.kill(launched_pid(p, "worker 1"), signal.SIGKILL)
    rc = p.wait(180)
    text = log_text(p)
    grew = re.findall(r"generation \d+ with 2 ranks resumes at step (\d+)", text)
    print(f"  rejoin: launcher exit {rc}; back to 2 ranks at step {grew[-1] if grew else '-'}; "
          f"committed {committed(root)}")
    assert rc == 0 and grew and "desync" not in text, text[-3000:]
    assert "checkpoint hook" not in text, text[-3000:]
    assert "step-000000060" in committed(root), os.listdir(root)  # checkpoints went on
    d = rel_diff(read_params(out), ref)
    print(f"  rejoin: relative difference to the uninterrupted run {d:.2e}")
    assert d < 1e-5, d


def test_update_on_shards_kill_shard_mid_write(h):
    """kill -9 of a shard server while it writes its part (held before the
    fsync by TETHER_SHARD_TEST_CKPT_STALL): that checkpoint never commits,
    the job stops (the restarted shard holds no state, and says so), the
    previous checkpoint verifies, and --resume auto continues from it to
    the uninterrupted run's parameters, bitwise. (Steps go on while the
    shards write: the shard is killed with a step in flight.)"""
    ref = straight(h, 40, extra=SHARDS, shards=2)
    root = os.path.join(h.dir, "ck-shard-kill")
    env = {"TETHER_SHARD_TEST_CKPT_STALL": "60000@19", "TETHER_COLL_DEADLINE_MS": "5000"}
    # Paced: unpaced steps take about a millisecond, and on a loaded
    # machine the last one could end before the kill lands.
    p = spawn(h, "shard-killed", 2, ["--max-steps", "40", "--checkpoint-dir", root,
                                     "--checkpoint-every-steps", "10", "--pace-ms", "50",
                                     *SHARDS],
              env=env, restarts=0, shards=2)
    p.wait_line(lambda l: "stalls" in l and "before its fsync" in l, 60,
                "a shard holding its part before the fsync", stream="log")
    os.kill(launched_pid(p, "shard 0"), signal.SIGKILL)
    rc = p.wait(120)
    text = log_text(p)
    assert rc != 0, "the job cannot go on without the shard's state"
    # the parts are written while training goes on: the loss shows in a
    # step, or in rank 0's question for the parts
    assert "resume from the last checkpoint" in text or "lost while it wrote" in text, \
        text[-3000:]
    assert committed(root) == ["step-000000010"], os.listdir(root)
    assert not os.path.exists(os.path.join(root, "step-000000020", "MANIFEST"))
    rc, vtext = verify_checkpoint(os.path.join(root, "step-000000010"))
    assert rc == 0, vtext
    out = os.path.join(h.dir, "after-shard-kill.bin")
    launch(h, "after-shard-kill", 2, ["--max-steps", "40", "--checkpoint-dir", root,
                                      "--resume", "auto", "--dump-params", out, *SHARDS],
           shards=2)
    d = rel_diff(read_params(out), ref)
    print(f"  shard killed mid-write; resumed from step 10: relative difference {d:.2e}")
    assert d == 0.0, f"parameters differ by {d:.2e} (bitwise expected)"


def test_lost_shard_recovers_under_the_launcher(h):
    """With the update on the shards, a shard server holds the only copy of
    its chunks' parameters and momentum; kill -9 it mid-run under
    tether-launch (restarts allowed) and the job still ends on its own: the
    launcher restarts the shard (empty), the workers fail their step with
    the reason ("restarted and lost ... resume from the last checkpoint")
    and are restarted, resume from the newest checkpoint the coordinator
    recorded (--resume job, the default), put it on the shards, and finish
    with the uninterrupted run's parameters, bitwise."""
    ref = straight(h, 60, extra=SHARDS, shards=2)
    root = os.path.join(h.dir, "ck-shard-lost")
    out = os.path.join(h.dir, "after-shard-lost.bin")
    p = spawn(h, "shard-lost", 2, ["--max-steps", "60", "--checkpoint-dir", root,
                                   "--checkpoint-every-steps", "10", "--pace-ms", "60",
                                   "--dump-params", out, *SHARDS],
              env={"TETHER_COLL_DEADLINE_MS": "5000"}, restarts=4, shards=2)
    wait_for(lambda: "step-000000020" in committed(root), 60, "checkpoint step 20 committed")
    wait_for(lambda: job_step(h, p) >= 24, 60, "the coordinator at step 24")
    known = job_step(h, p) + 1
    os.kill(launched_pid(p, "shard 0"), signal.SIGKILL)
    t0 = time.monotonic()
    rc = p.wait(180)
    text = log_text(p)
    resumed = re.findall(r"resumed from checkpoint step-(\d+)", text)
    summary = [l for l in text.splitlines() if "summary:" in l]
    print(f"  shard 0 killed, the coordinator knowing {known} steps; launcher exit {rc} after "
          f"{time.monotonic() - t0:.1f} s; resumed from {sorted(set(resumed))}; (done, resumed "
          f"at, again) {redone(text)}; {summary[-1] if summary else 'no summary'}")
    assert rc == 0, text[-3000:]
    assert "restarted and lost the job's parameters and optimizer state" in text, text[-3000:]
    assert resumed and all(int(r) >= 20 for r in resumed), resumed
    check_redone(text, known, int(resumed[-1]))
    assert "daemon-restarts=1" in summary[-1], summary
    d = rel_diff(read_params(out), ref)
    print(f"  relative difference to the uninterrupted run: {d:.2e}")
    assert d == 0.0, f"parameters differ by {d:.2e} (bitwise expected)"


def worker_pids(launcher_pid, worker_id):
    """tether-train processes started by this launcher with this id."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if ppid == launcher_pid and f"TETHER_WORKER_ID={worker_id}".encode() in env:
            pids.append(int(d))
    return pids


def test_kill_writer(h):
    ref = straight(h, 24)
    root = ckdir(h)
    p = spawn(h, "killed", 2, ["--max-steps", "24", "--checkpoint-dir", root,
                               "--checkpoint-every-steps", "6"],
              env={"TETHER_CKPT_TEST_STALL_STEP": "12"}, restarts=0)
    first = os.path.join(root, "step-000000006", "MANIFEST")

    def writing():
        """The checkpoint after step 6 (12, or later when deferred behind
        step 6's) whose part rank 1 is writing, once step 6 committed."""
        if not os.path.exists(first):
            return None
        for d in sorted(os.listdir(root)):
            if d != "step-000000006" and os.path.exists(os.path.join(root, d, "shard-1.bin.tmp")):
                return d
        return None

    wait_for(lambda: writing() is not None, 60, "rank 1 writing its part after step 6")
    stalled = writing()
    pids = worker_pids(p.pid, "worker-1")
    assert len(pids) == 1, f"worker-1 pids: {pids}"
    os.kill(pids[0], signal.SIGKILL)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)
    time.sleep(0.2)
    assert not os.path.exists(os.path.join(root, stalled, "MANIFEST")), \
        "a checkpoint whose writer died was committed"
    assert committed(root) == ["step-000000006"], os.listdir(root)
    rc, text = verify_checkpoint(os.path.join(root, "step-000000006"))
    assert rc == 0, text
    out = os.path.join(h.dir, "after-kill.bin")
    launch(h, "after-kill", 2, ["--max-steps", "24", "--checkpoint-dir", root,
                                "--resume", "auto", "--dump-params", out])
    assert not os.path.exists(os.path.join(root, stalled)), "uncommitted leftover not removed"
    d = rel_diff(read_params(out), ref)
    print(f"  resumed from step 6 after the kill: relative difference {d:.2e}")
    assert d < 1e-6, f"parameters differ by {d:.2e}"


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def test_flipped_byte(h):
    ref = straight(h, 24)
    root = ckdir(h)
    launch(h, "save", 2, ["--max-steps", "12", "--checkpoint-dir", root,
                          "--checkpoint-every-steps", "6"])
    bad = os.path.join(root, "step-000000012")
    flip_byte(os.path.join(bad, "shard-1.bin"), 1000)
    rc, text = verify_checkpoint(bad)
    assert rc == 1 and "shard-1.bin" in text, f"verify: rc {rc}: {text}"
    p = launch(h, "refused", 2, ["--max-steps", "24", "--checkpoint-dir", root,
                                 "--resume", "auto"], expect=1)
    t = log_text(p)
    assert "shard-1.bin" in t and "refusing" in t, "refusal does not name the bad part"
    out = os.path.join(h.dir, "latest-valid.bin")
    p = launch(h, "latest-valid", 2, ["--max-steps", "24", "--checkpoint-dir", root,
                                      "--resume", "latest-valid", "--dump-params", out])
    said = [l for l in p.lines("out") if "resumed from checkpoint" in l]
    assert len(said) == 1 and "step-000000006 (--resume latest-valid)" in said[0], said
    d = rel_diff(read_params(out), ref)
    print(f"  --resume latest-valid (step 6) after a flipped byte: relative difference {d:.2e}")
    assert d < 1e-6, f"parameters differ by {d:.2e}"


def test_timer_schedule(h):
    # Every 5 ms of rank 0's clock: a control reduce at every step, ranks
    # agree through it; retention keeps 2. The training result must not
    # change because of checkpoints.
    ref = straight(h, 24)
    root = ckdir(h)
    out = os.path.join(h.dir, "timer.bin")
    launch(h, "timer", 2, ["--max-steps", "24", "--checkpoint-dir", root,
                           "--checkpoint-every-s", "0.005", "--checkpoint-keep", "2",
                           "--dump-params", out])
    assert rel_diff(read_params(out), ref) == 0.0, "checkpoints changed the training result"
    ids = committed(root)
    assert 1 <= len(ids) <= 2, os.listdir(root)
    with open(os.path.join(root, "latest")) as f:
        assert f.read().strip() == ids[-1]
    for i in ids:
        rc, text = verify_checkpoint(os.path.join(root, i))
        assert rc == 0, text
    print(f"  timer schedule: committed {ids} (kept 2)")


def test_root_that_cannot_take_a_checkpoint(h):
    # A file where the root should be: every worker refuses it before it
    # joins (exit 2, which the launcher does not restart), not after hours
    # of training without a checkpoint.
    bad = os.path.join(h.dir, "root-is-a-file")
    with open(bad, "w") as f:
        f.write("not a directory\n")
    p = launch(h, "badroot", 2, ["--max-steps", "10", "--checkpoint-dir", bad,
                                 "--checkpoint-every-steps", "5"], expect=2)
    text = log_text(p)
    assert f"--checkpoint-dir cannot take checkpoints: {bad}: not a directory" in text, text[-2000:]
    assert "done:" not in text and "restart 1" not in text, text[-2000:]
    refused = [l for l in text.splitlines() if "--checkpoint-dir" in l][0]
    # A root that takes files but not this checkpoint (a file where its
    # directory goes): the attempt fails, and no line may claim that a
    # previous checkpoint stays valid when the run has none.
    root = ckdir(h)
    os.makedirs(root)
    with open(os.path.join(root, "step-000000005"), "w") as f:
        f.write("in the way\n")
    p = launch(h, "blocked", 2, ["--max-steps", "5", "--checkpoint-dir", root,
                                 "--checkpoint-every-steps", "5"])
    text = log_text(p)
    assert "checkpoint step-000000005 aborted" in text, text[-2000:]
    assert "this run has committed none yet" in text, text[-2000:]
    assert "the previous one stays valid" not in text, text[-2000:]
    assert "none of this run's 1 checkpoint(s) committed" in text, text[-2000:]
    print("  refused at start: " + refused)


if __name__ == "__main__":
    if not have_data():
        print(f"SKIP: no Fashion-MNIST under {DATA}")
        raise SystemExit(77)
    tests = [test_resume_equivalence, test_reshard, test_kill_writer, test_flipped_byte,
             test_timer_schedule, test_all_workers_restart_resume_the_job,
             test_worker_rejoins_a_checkpointing_job,
             test_all_workers_restart_without_checkpoints_say_so,
             test_root_that_cannot_take_a_checkpoint]
    try:
        binary("tether-shard")
        tests += [test_reshard_ps, test_update_on_shards_resume,
                  test_update_on_shards_kill_shard_mid_write,
                  test_lost_shard_recovers_under_the_launcher,
                  test_all_workers_restart_update_on_shards]
    except FileNotFoundError:
        print("no tether-shard in this build: PS reshard case not run")
    run_tests(tests)
