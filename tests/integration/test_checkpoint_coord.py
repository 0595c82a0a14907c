#!/usr/bin/env python3
"""Coordinated checkpoints end to end (docs/checkpoints.md): a real
tether-coordinator and tether-train workers on 127.0.0.1; the coordinator
keeps the schedule, writes the manifest and records committed checkpoints
in its durable state.

  * on demand: `tetherctl checkpoint JOB --wait` while the job trains ->
    a checkpoint is committed at a step boundary, listed by `tetherctl
    checkpoints JOB`, verifies, `latest` names it; after kill -9 and a
    restart of the coordinator the list is the same and training finishes;
  * the coordinator's timer (--checkpoint-every-s) -> several commits,
    retention keeps 2 on disk and in the record, the training result is
    the one of a run without checkpoints;
  * full cluster restart: every process killed mid-run, `latest` removed;
    a restarted coordinator (same state dir) and new workers with
    --resume auto resume from the coordinator's record and end with the
    parameters of an uninterrupted run;
  * a fenced rank 0 with its commit in flight: stopped (SIGSTOP) while its
    commit thread holds the commit (a test knob), evicted, the survivor
    commits newer checkpoints; after SIGCONT the old commit reaches the
    coordinator and is refused (its generation is over), so `latest` and
    the record keep the newer checkpoints;
  * a checkpoint root that cannot be written: the failure reaches the
    coordinator (tetherctl checkpoint --wait ends with it, checkpoints and
    /metrics show it), rank 0 pauses before retrying, and a request made
    after the repair commits at once.
"""
import json
import os
import re
import signal
import time
import urllib.request

from tt_harness import (binary, committed, free_port, read_params,
                        rel_diff, run_tests, verify_checkpoint, wait_for)

DATA = os.environ.get("TETHER_FMNIST", "/usr/share/datasets/fashion-mnist")
BASE = ["--layers", "784,64,10", "--train-limit", "2000", "--batch", "64", "--lr", "0.05",
        "--log-every", "0", "--seed", "7", "--epochs", "2", "--data", DATA,
        "--backend", "ring"]
FAST = {
    "TETHER_HEARTBEAT_MS": "100",
    "TETHER_HEARTBEAT_TIMEOUT_MS": "1000",
    "TETHER_LAST_CALL_MS": "300",
    "TETHER_MIN_WORKERS": "2",
    "TETHER_MAX_WORKERS": "2",
}


def workers(h, coord, job, args, tag="w", n=2, extra_env=None):
    ps = []
    for i in range(n):
        env = dict(os.environ, **FAST)
        env.update(extra_env or {})
        env.update({"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": job,
                    "TETHER_WORKER_ID": f"{tag}{i}",
                    "TETHER_ENDPOINT": f"tcp://127.0.0.1:{free_port()}"})
        ps.append(h.spawn(f"{tag}{i}", [binary("tether-train"), *BASE, *args], env=env))
    return ps


def finish(ps, timeout=120):
    for i, p in enumerate(ps):
        rc = p.wait(timeout)
        assert rc == 0, f"worker {i} exited {rc}"


def last_step(h, coord, job):
    rc, out, _ = h.ctl(coord.endpoint, "members", job, "--json", check=False)
    if rc != 0:
        return -1
    return max((m["last_step"] for m in json.loads(out)["members"]), default=-1)


def listed(h, coord, job):
    return h.ctl_json(coord.endpoint, "checkpoints", job)


def ids_of(lst):
    return [c["id"] for c in lst["checkpoints"]]


def reference(h, coord, steps):
    out = os.path.join(h.dir, f"ref-{steps}.bin")
    finish(workers(h, coord, f"ref{steps}", ["--max-steps", str(steps), "--dump-params", out],
                   tag=f"r{steps}-"))
    return read_params(out)


def test_on_demand(h):
    coord = h.coordinator()
    root = os.path.join(h.dir, "ckpt")
    ps = workers(h, coord, "demand", ["--max-steps", "150", "--pace-ms", "25",
                                      "--checkpoint-dir", root])
    wait_for(lambda: last_step(h, coord, "demand") >= 10, 60, "training reaches step 10")
    t0 = time.monotonic()
    rc, out, err = h.ctl(coord.endpoint, "checkpoint", "demand", "--wait", "--json",
                         timeout_ms=30000)
    took = time.monotonic() - t0
    print(f"  tetherctl checkpoint --wait: {took * 1000:.0f} ms; {out.strip()}")
    lst = listed(h, coord, "demand")
    assert len(lst["checkpoints"]) == 1, lst
    ck = lst["checkpoints"][0]
    assert ck["step"] >= 10 and ck["bytes"] > 0, ck
    assert lst["served"] >= 1 and lst["requested"] == lst["served"], lst
    assert committed(root) == [ck["id"]], os.listdir(root)
    with open(os.path.join(root, "latest")) as f:
        assert f.read().strip() == ck["id"]
    rc, text = verify_checkpoint(os.path.join(root, ck["id"]))
    assert rc == 0, text
    # The record is durable: a coordinator killed and restarted lists it.
    coord.kill9()
    coord2 = h.coordinator(port=coord.port, name="coord2")
    assert ids_of(listed(h, coord2, "demand")) == [ck["id"]]
    finish(ps)
    # No schedule was set: the on-demand checkpoint is the only one.
    assert committed(root) == [ck["id"]], os.listdir(root)


def test_coordinator_timer(h):
    coord = h.coordinator()
    ref = reference(h, coord, 60)
    root = os.path.join(h.dir, "ckpt")
    out = os.path.join(h.dir, "timer.bin")
    ps = workers(h, coord, "timer", ["--max-steps", "60", "--pace-ms", "40",
                                     "--checkpoint-dir", root, "--checkpoint-every-s", "0.4",
                                     "--checkpoint-keep", "2", "--dump-params", out])
    finish(ps)
    st = h.ctl_json(coord.endpoint, "status")
    job = [j for j in st["jobs"] if j["job_id"] == "timer"][0]
    assert job["settings"]["checkpoint_every_ms"] == 400, job
    assert job["settings"]["checkpoint_keep"] == 2, job
    lst = listed(h, coord, "timer")
    print(f"  timer: {lst['requested']} requests, {lst['served']} served, "
          f"kept {ids_of(lst)}")
    assert lst["served"] >= 2, lst
    assert ids_of(lst) == committed(root), (ids_of(lst), os.listdir(root))
    assert len(committed(root)) == 2, os.listdir(root)
    assert rel_diff(read_params(out), ref) == 0.0, "checkpoints changed the training result"


def members(h, coord, job):
    rc, out, _ = h.ctl(coord.endpoint, "members", job, "--json", check=False)
    return json.loads(out) if rc == 0 else {"generation": 0, "members": []}


def test_fenced_rank0_commit_refused(h):
    coord = h.coordinator()
    root = os.path.join(h.dir, "ckpt")
    job = "fence"
    env = {"TETHER_MIN_WORKERS": "1", "TETHER_TRAIN_TEST_COMMIT_HOLD_MS": "3000"}
    # 6 epochs of 32 steps: the survivor must still be training when the
    # second request comes (2 epochs ran out first under TSan on a slow VM)
    args = ["--max-steps", "300", "--epochs", "6", "--pace-ms", "25", "--checkpoint-dir", root]
    ps = workers(h, coord, job, args, tag="a", n=1, extra_env=env)
    ps += workers(h, coord, job, args, tag="b", n=1, extra_env=env)
    wait_for(lambda: len(members(h, coord, job)["members"]) == 2 and
             last_step(h, coord, job) >= 10, 60, "both workers training")
    m = members(h, coord, job)
    gen = m["generation"]
    r0 = [x["worker_id"] for x in m["members"] if x["rank"] == 0][0]
    p0, p1 = (ps[0], ps[1]) if r0 == "a0" else (ps[1], ps[0])
    h.ctl(coord.endpoint, "checkpoint", job)
    held = p0.wait_line(lambda l: "test knob: commit of" in l, 30, "the held commit", stream="log")
    stale_id = re.search(r"commit of (\S+) \(generation (\d+)\)", held).group(1)
    p0.signal(signal.SIGSTOP)
    wait_for(lambda: members(h, coord, job)["generation"] > gen and
             len(members(h, coord, job)["members"]) == 1, 20, f"{r0} evicted")
    # the survivor serves the open request and a new one
    h.ctl(coord.endpoint, "checkpoint", job, "--wait", timeout_ms=30000)
    newer = ids_of(listed(h, coord, job))
    p0.signal(signal.SIGCONT)
    refused = coord.wait_line(lambda l: f"commit of {stale_id} sent at" in l, 20,
                              "the stale commit refused", stream="log")
    print(f"  {r0} (rank 0 of generation {gen}) held {stale_id}; survivor committed {newer}")
    print("  coordinator: " + refused.split("coord_ckpt.c")[-1].strip()[:220])
    assert f"sent at generation {gen} but the job is at generation" in refused, refused
    finish(ps)
    lst = ids_of(listed(h, coord, job))
    assert stale_id not in lst and lst[:len(newer)] == newer, (stale_id, lst)
    assert stale_id not in committed(root), os.listdir(root)
    # its parts were durable before the hold, and the survivor's commit of
    # a later step removed them with the directory (retention's leftovers)
    assert not os.path.exists(os.path.join(root, stale_id)), os.listdir(root)
    with open(os.path.join(root, "latest")) as f:
        assert f.read().strip() == lst[-1]
    for ck in lst:
        rc, text = verify_checkpoint(os.path.join(root, ck))
        assert rc == 0, text


def train_then_kill(h, coord, job, args, root, n):
    """Trains `job` (paced) until n checkpoints are committed under root,
    then kill -9s every worker."""
    ps = workers(h, coord, job, [*args, "--pace-ms", "30"])
    wait_for(lambda: len(committed(root)) >= n, 60, f"{n} checkpoint(s) committed")
    for p in ps:
        p.kill9()


def test_full_restart(h):
    coord = h.coordinator()
    ref = reference(h, coord, 60)
    root = os.path.join(h.dir, "ckpt")
    args = ["--max-steps", "60", "--checkpoint-dir", root, "--checkpoint-every-steps", "10"]
    train_then_kill(h, coord, "full", args, root, 2)
    coord.kill9()
    os.unlink(os.path.join(root, "latest"))  # the coordinator's record must suffice
    coord2 = h.coordinator(port=coord.port, name="coord2")
    # A manifest renamed just before the kill may miss the record: the
    # record is what counts, and it names a committed checkpoint.
    recorded = ids_of(listed(h, coord2, "full"))[-1]
    assert recorded in committed(root), (recorded, os.listdir(root))
    out = os.path.join(h.dir, "resumed.bin")
    ps = workers(h, coord2, "full", [*args, "--resume", "auto", "--dump-params", out],
                 tag="again", extra_env={"TETHER_LOG": "info"})
    finish(ps, timeout=180)
    text = "\n".join(ps[0].lines("log"))
    assert f"resumed from checkpoint {recorded}" in text, text[-2000:]
    d = rel_diff(read_params(out), ref)
    print(f"  full restart: resumed from {recorded}, relative difference {d:.2e}")
    assert d < 1e-6, d


def test_restart_when_no_checkpoint_verifies(h):
    """--resume job (the default) finds the job's record, but every
    recorded checkpoint is damaged: the restarted workers say so and start
    without one instead of exiting (--resume latest-valid would refuse)."""
    coord = h.coordinator()
    root = os.path.join(h.dir, "ckpt")
    args = ["--max-steps", "40", "--checkpoint-dir", root, "--checkpoint-every-steps", "10"]
    train_then_kill(h, coord, "bad", args, root, 1)
    wait_for(lambda: ids_of(listed(h, coord, "bad")), 10, "the record")
    for ck in committed(root):
        with open(os.path.join(root, ck, "shard-0.bin"), "r+b") as f:
            f.seek(1000)
            b = f.read(1)
            f.seek(1000)
            f.write(bytes([b[0] ^ 0x40]))
    ps = workers(h, coord, "bad", args, tag="again")
    finish(ps)
    text = "\n".join(ps[0].lines("log"))
    line = [l for l in text.splitlines() if "starting without a checkpoint" in l]
    print("  " + (line[0].split("ckpt ", 1)[-1][:200] if line else "no such line"))
    assert line and "none of the" in line[0], text[-2000:]


def not_written(ps):
    """Parts that failed, as their writers logged them."""
    pat = re.compile(r"checkpoint step-\d+ not written: ")
    return sum(1 for p in ps for l in p.lines("log") if pat.search(l))


def test_failed_part_is_reported_and_paced(h):
    """A checkpoint root that stops being writable (here: a file where the
    directory was; a full disk behaves alike): `tetherctl checkpoint
    --wait` ends at once with the writer's reason instead of at its
    timeout, `tetherctl checkpoints`, `status` and /metrics show it, rank 0
    pauses before it retries the open request (no attempt within the 5 s
    pause), and once the root is back a new request commits at once."""
    http = f"127.0.0.1:{free_port()}"
    coord = h.coordinator(extra=["--http", http])
    root = os.path.join(h.dir, "ckpt")
    ps = workers(h, coord, "disk", ["--max-steps", "100000", "--epochs", "1000",
                                    "--pace-ms", "10", "--checkpoint-dir", root])
    wait_for(lambda: last_step(h, coord, "disk") >= 10, 60, "training reaches step 10")
    h.ctl(coord.endpoint, "checkpoint", "disk", "--wait", timeout_ms=30000)
    os.rename(root, root + ".away")
    with open(root, "w") as f:
        f.write("not a directory\n")
    t0 = time.monotonic()
    rc, out, err = h.ctl(coord.endpoint, "checkpoint", "disk", "--wait", check=False,
                         timeout_ms=30000)
    took = time.monotonic() - t0
    print(f"  --wait ended after {took:.2f} s, exit {rc}: {err.strip()[:160]}")
    assert rc == 1 and took < 15, (rc, took, err)
    assert "request 2 of job 'disk' failed" in err and "Not a directory" in err, err
    lst = listed(h, coord, "disk")
    f = lst["last_failure"]
    assert lst["failures_since_commit"] >= 1 and f["request"] == 2, lst
    assert f["worker"] in ("w0", "w1") and "Not a directory" in f["reason"], f
    rc, text, _ = h.ctl(coord.endpoint, "checkpoints", "disk")
    assert "failed attempts: " in text and f["id"] in text, text
    rc, text, _ = h.ctl(coord.endpoint, "status")
    assert "checkpoint attempt(s) failed since the newest commit" in text, text
    status, body = http_get(http, "/metrics")
    line = [l for l in body.splitlines()
            if l.startswith('tether_job_checkpoint_failures_since_commit{job="disk"}')]
    assert status == 200 and line and float(line[0].split()[-1]) >= 1, line
    # The open request waits out rank 0's pause instead of being retried
    # every 16 steps (160 ms here).
    ps[0].wait_line(lambda l: "taken up again in 5 s" in l, 10, "the pause", stream="log")
    n = not_written(ps)
    time.sleep(3)
    print(f"  attempts that failed: {n}, 3 s later: {not_written(ps)}")
    assert not_written(ps) == n, (n, not_written(ps))
    # The operator frees the root and asks again: taken at once.
    os.unlink(root)
    os.rename(root + ".away", root)
    t0 = time.monotonic()
    h.ctl(coord.endpoint, "checkpoint", "disk", "--wait", timeout_ms=30000)
    print(f"  a new request after the repair committed in {time.monotonic() - t0:.2f} s")
    lst = listed(h, coord, "disk")
    assert len(lst["checkpoints"]) == 2 and lst["failures_since_commit"] == 0, lst
    job = [j for j in h.ctl_json(coord.endpoint, "status")["jobs"] if j["job_id"] == "disk"][0]
    assert job["checkpoint_failures"] == 0 and "checkpoint_failure" not in job, job
    for p in ps:
        p.kill9()


def http_get(addr, path):
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=5) as r:
        return r.status, r.read().decode()


if __name__ == "__main__":
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print(f"SKIP: no Fashion-MNIST under {DATA}")
        raise SystemExit(77)
    run_tests([test_on_demand, test_coordinator_timer, test_full_restart,
               test_fenced_rank0_commit_refused, test_restart_when_no_checkpoint_verifies,
               test_failed_part_is_reported_and_paced])
