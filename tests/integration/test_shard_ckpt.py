#!/usr/bin/env python3
"""Optimizer-mode checkpoints written by the shard servers (docs/checkpoints.md):
a real tether-coordinator, real tether-shard daemons and ranks of ps_ckpt_check
(the PS backend of libtether in optimizer mode, where parameters and momentum
live only on the shards) on 127.0.0.1. The shards write their chunks as parts,
rank 0 commits the manifest; the checkpoint verifies and loads into a different
number of shards and ranks and the run continues with the same updates; a shard
killed while it writes leaves that checkpoint uncommitted and the previous one
valid and loadable."""
import os
import signal

from tt_harness import binary, committed, read_params, rel_diff, run_tests, verify_checkpoint, \
    wait_for

STEPS = 12


def ranks(h, coord, job, world, shards, *args):
    return [h.spawn(f"{job}-r{r}", [binary("ps_ckpt_check"), "--coordinator", coord.endpoint,
                                    "--job", job, "--rank", str(r), "--world", str(world),
                                    "--shards", str(shards), "--steps", str(STEPS), *args],
                    env={"TETHER_LOG": "warn"})
            for r in range(world)]


def finish(ps, timeout=120):
    for p in ps:
        rc = p.wait(timeout)
        assert rc == 0, f"{p.name} exited {rc}: " + " | ".join(p.lines()[-6:])
    return ps[0].lines()


def test_shards_write_and_a_resharded_run_continues(h):
    coord = h.coordinator()
    shards = [h.shard(coord, f"s{i}") for i in range(2)]
    root = os.path.join(h.dir, "ckpt")
    straight = os.path.join(h.dir, "straight.bin")
    out = finish(ranks(h, coord, "a", 3, 2, "--save-at", "6", "--ckpt", root, "--out", straight))
    ck = [l for l in out if l.startswith("CKPT")]
    assert len(ck) == 1 and "parts=2" in ck[0], out
    print("  ", ck[0])
    cdir = os.path.join(root, "step-000000006")
    rc, text = verify_checkpoint(cdir)
    assert rc == 0, text
    assert sorted(f for f in os.listdir(cdir) if f.endswith(".bin")) == ["ps-0.bin", "ps-1.bin"]
    # The shards wrote what they hold: both parts name their own chunks.
    assert "ps-0.bin" in text and "ps-1.bin" in text, text
    assert open(os.path.join(root, "latest")).read().strip() == "step-000000006"
    # In two phases, as tether-train takes them: rank 0 sends the request
    # and trains on without an answer, the shards copy before its next
    # push, and rank 0 collects the parts between later steps. Training is
    # unchanged, and the parts load. A request for the state after the
    # wrong step is first sent too: begin cannot know, the result refuses.
    root2 = os.path.join(h.dir, "ckpt2")
    straight2 = os.path.join(h.dir, "straight2.bin")
    out = finish(ranks(h, coord, "a2", 3, 2, "--save-at", "6", "--ckpt", root2, "--out", straight2,
                       "--two-phase", "1", "--stale-begin", "1"))
    assert len([l for l in out if l.startswith("CKPT")]) == 1, out
    refused = [l for l in out if l.startswith("REFUSED")]
    assert refused and refused[0].startswith("REFUSED ESTALE"), out
    assert "holds the state after step 5, not after step 6" in refused[0], refused
    print("  ", refused[0][:160])
    assert read_params(straight2).tobytes() == read_params(straight).tobytes()
    cdir2 = os.path.join(root2, "step-000000006")
    rc, text = verify_checkpoint(cdir2)
    assert rc == 0, text

    shards.append(h.shard(coord, "s2"))
    same = os.path.join(h.dir, "same-world.bin")
    finish(ranks(h, coord, "b", 3, 3, "--resume", cdir, "--out", same))
    a, b = read_params(straight), read_params(same)
    assert a.tobytes() == b.tobytes(), f"3 ranks, 2 -> 3 shards: rel diff {rel_diff(b, a)}"
    same2 = os.path.join(h.dir, "same-world-2.bin")
    finish(ranks(h, coord, "b2", 3, 3, "--resume", cdir2, "--out", same2))
    assert read_params(same2).tobytes() == a.tobytes(), "two-phase checkpoint: resumed differently"
    other = os.path.join(h.dir, "two-ranks.bin")
    finish(ranks(h, coord, "c", 2, 3, "--resume", cdir, "--out", other))
    d = rel_diff(read_params(other), a)
    print(f"   resumed: 3 ranks on 3 shards bitwise equal; 2 ranks on 3 shards rel diff {d:.2e}")
    assert d < 1e-6, d


def test_shard_killed_while_writing_never_commits(h):
    coord = h.coordinator()
    s0 = h.shard(coord, "s0")
    s1 = h.shard(coord, "s1", env={"TETHER_SHARD_TEST_CKPT_STALL": "60000@9"})
    root = os.path.join(h.dir, "ckpt")
    ps = ranks(h, coord, "k", 2, 2, "--save-at", "5,10", "--ckpt", root, "--deadline-ms", "4000")
    ps[0].wait_line(lambda l: l.startswith("CKPT") and "step-000000005" in l, 60, "first ckpt")
    wait_for(lambda: "stalls" in open(s1.log_path).read(), 30, "s1 stalls in its write")
    s1.kill9()
    assert ps[0].wait(30) != 0, "rank 0 committed a checkpoint a dead shard never wrote"
    failed = [l for l in ps[0].lines() if l.startswith("FAILED")]
    assert failed and "lost while it wrote" in failed[0], ps[0].lines()
    print("  ", failed[0])
    assert committed(root) == ["step-000000005"], committed(root)
    assert open(os.path.join(root, "latest")).read().strip() == "step-000000005"
    assert not os.path.exists(os.path.join(root, "step-000000010", "MANIFEST"))
    rc, text = verify_checkpoint(os.path.join(root, "step-000000005"))
    assert rc == 0, text

    # The previous checkpoint loads into the shards left plus a new one and
    # gives the run it would have had.
    h.shard(coord, "s2")
    wait_for(lambda: sorted(s["shard_id"] for s in h.ctl_json(coord.endpoint, "shards")["shards"]
                            if s["alive"]) == ["s0", "s2"], 15, "s1 declared dead, s2 live")
    ref = os.path.join(h.dir, "ref.bin")
    finish(ranks(h, coord, "ref", 2, 2, "--out", ref))
    got = os.path.join(h.dir, "resumed.bin")
    finish(ranks(h, coord, "after", 2, 2, "--resume", os.path.join(root, "step-000000005"),
                 "--out", got))
    assert read_params(got).tobytes() == read_params(ref).tobytes()


def test_a_stopped_shard_does_not_hold_the_question(h):
    # The phase-2 question waits for no answer (tt_ps_ckpt.c): with one
    # shard stopped (SIGSTOP: connected, silent) each call returns at once
    # with EAGAIN, and only the deadline ends the wait, naming the shard. A
    # call that waited for the answer would have been one call, ending in
    # the timeout.
    coord = h.coordinator()
    s0 = h.shard(coord, "s0")
    s1 = h.shard(coord, "s1")
    root = os.path.join(h.dir, "ckpt")
    go = os.path.join(h.dir, "go")
    ps = ranks(h, coord, "q", 2, 2, "--ckpt", root, "--deadline-ms", "1500", "--unanswered", go)
    ps[0].wait_line(lambda l: l.startswith("BEGUN"), 60, "the last checkpoint begun")
    wait_for(lambda: "wrote checkpoint part" in open(s1.log_path).read(), 30, "s1 wrote its part")
    s1.signal(signal.SIGSTOP)
    open(go, "w").close()
    try:
        line = ps[0].wait_line(lambda l: l.startswith("UNANSWERED"), 60, "the question's end")
    finally:
        s1.signal(signal.SIGCONT)
    finish(ps)
    print("  ", line[:200])
    assert line.startswith("UNANSWERED ETIMEDOUT"), line
    assert "shard s1 did not answer" in line, line
    polls = int(line.split("polls=")[1].split()[0])
    assert polls > 1, f"one call waited for the whole deadline: {line}"
    assert s0.alive() and s1.alive()


if __name__ == "__main__":
    run_tests([test_shards_write_and_a_resharded_run_continues,
               test_shard_killed_while_writing_never_commits,
               test_a_stopped_shard_does_not_hold_the_question])
