#!/usr/bin/env python3
"""Collectives integration tests: coll_check workers (public libtether API)
joined through a real tether-coordinator on 127.0.0.1, each with its own
ring endpoint. Correctness for W = 1..4 (64 MiB only for W <= 2: CI has 2
cores), a desync (every rank fails within 5 s naming both operations), a
SIGSTOPped rank (the others time out naming it), and `tetherctl dump`
collecting every rank's flight record through the coordinator; the
bucketed steps also run on the ps backend with two real tether-shard
daemons."""
import json
import signal
import time

from tt_harness import binary, free_port, parse_kv, run_tests, wait_for

HB_MS = 200


def start_ranks(h, coord, job, w, extra=(), env=None, hb_timeout_ms=3000, env_of=None):
    procs = []
    for i in range(w):
        e = {"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": job,
             "TETHER_WORKER_ID": f"{job}-w{i}", "TETHER_MIN_WORKERS": str(w),
             "TETHER_MAX_WORKERS": str(w), "TETHER_LAST_CALL_MS": "100",
             "TETHER_HEARTBEAT_MS": str(HB_MS), "TETHER_HEARTBEAT_TIMEOUT_MS": str(hb_timeout_ms),
             "TETHER_JOIN_TIMEOUT_MS": "30000",
             "TETHER_ENDPOINT": f"tcp://127.0.0.1:{free_port()}", "TETHER_LOG": "warn"}
        e.update(env or {})
        e.update(env_of(i) if env_of else {})
        procs.append(h.spawn(f"{job}-w{i}", [binary("coll_check"), *extra], env=e))
    joined = [parse_kv(p.wait_line(lambda l: l.startswith("JOINED"), 30, "JOINED"))
              for p in procs]
    # ranks follow the sorted worker ids, so process i is rank i
    assert [j["rank"] for j in joined] == list(range(w)), joined
    return procs


def result_of(p, timeout):
    line = p.wait_line(lambda l: l.startswith("RESULT"), timeout, "RESULT")
    head, _, msg = line.partition(" msg=")
    kv = parse_kv(head)
    kv["msg"] = msg
    return kv


def dump_sections(h, coord, job):
    out = h.ctl(coord.endpoint, "dump", job, "--json", timeout_ms=6000)[1]
    return json.loads(out)


def test_correctness_w1_to_w4(h):
    coord = h.coordinator()
    for w in (1, 2, 3, 4):
        t0 = time.monotonic()
        job = f"c{w}"
        extra = ["--idle"] + (["--big"] if w <= 2 else [])
        procs = start_ranks(h, coord, job, w, extra)
        for p in procs:
            p.wait_line(lambda l: l.startswith("DONE"), 120, "DONE")
        for r, p in enumerate(procs):
            lines = p.lines()
            fails = [l for l in lines if l.startswith("FAIL")]
            assert not fails, f"W={w} rank {r}: {fails}"
            oks = " ".join(l for l in lines if l.startswith("OK"))
            for want in ("allreduce_f32_sum_1000003", "allreduce_f64_sum_1000003",
                         "allreduce_i64_sum_1000003", "allreduce_f32_min", "allreduce_f32_max",
                         "broadcast", "barrier", "buckets"):
                assert want in oks, f"W={w} rank {r} has no OK {want}: {oks}"
            if w <= 2:
                assert f"allreduce_f32_sum_{16 << 20}" in oks, f"W={w}: no 64 MiB check"
        if w == 3:
            d = dump_sections(h, coord, job)
            ranks = sorted(s["rank"] for s in d["sections"])
            assert ranks == [0, 1, 2], d
            for s in d["sections"]:
                assert s["answered"], f"rank {s['rank']} did not answer the dump"
                assert "allreduce" in s["text"] and "backend ring" in s["text"], s["text"][:400]
            print(f"  dump of W=3: {sum(len(s['text']) for s in d['sections'])} bytes of records")
        share = [l for l in procs[0].lines() if l.startswith("OK buckets")]
        print(f"  W={w}: all checks passed in {time.monotonic() - t0:.1f} s; {share[0][3:]}")
        for p in procs:
            p.signal(signal.SIGTERM)
        for p in procs:
            assert p.wait(15) == 0, f"{p.name} exit status {p.p.returncode}"


def test_desync_names_both_sides(h):
    coord = h.coordinator()
    procs = start_ranks(h, coord, "desync", 3, ["--scenario", "desync", "--odd-rank", "1"],
                        env={"TETHER_COLL_DEADLINE_MS": "20000"})
    for r, p in enumerate(procs):
        res = result_of(p, 15)
        assert res["status"] == "EDESYNC", f"rank {r}: {res}"
        assert res["ms"] < 5000, f"rank {r} took {res['ms']} ms to fail"
        assert "broadcast" in res["msg"] and "allreduce" in res["msg"], res["msg"]
        assert "rank 1" in res["msg"], res["msg"]
    print(f"  rank 0: {result_of(procs[0], 1)['msg']}")


def test_sigstop_times_out_naming_rank(h):
    coord = h.coordinator()
    procs = start_ranks(h, coord, "stop", 3, ["--scenario", "stop", "--idle"],
                        env={"TETHER_COLL_DEADLINE_MS": "2000"}, hb_timeout_ms=8000)
    for p in procs:
        p.wait_line(lambda l: l == "READY", 20, "READY")
    procs[2].signal(signal.SIGSTOP)
    for r in (0, 1):
        res = result_of(procs[r], 10)
        assert res["status"] in ("ETIMEDOUT", "EUNREACHABLE"), f"rank {r}: {res}"
        assert "rank 2" in res["msg"], f"rank {r} does not name rank 2: {res['msg']}"
        assert res["ms"] < 4000, res
    d = dump_sections(h, coord, "stop")
    by_rank = {s["rank"]: s for s in d["sections"]}
    for r in (0, 1):
        if r in by_rank:
            assert by_rank[r]["answered"] and "TIMEDOUT" in by_rank[r]["text"], by_rank[r]
    if 2 in by_rank:  # still a member: it cannot answer while stopped
        assert not by_rank[2]["answered"], by_rank[2]
    print(f"  rank 0: {result_of(procs[0], 1)['msg']}")
    procs[2].signal(signal.SIGCONT)


def test_kill_then_rebuild_on_new_generation(h):
    coord = h.coordinator()
    procs = start_ranks(h, coord, "regroup", 3, ["--scenario", "regroup"],
                        env={"TETHER_COLL_DEADLINE_MS": "3000", "TETHER_MIN_WORKERS": "2"},
                        hb_timeout_ms=1000)
    for p in procs:
        p.wait_line(lambda l: l == "READY", 20, "READY")
    procs[2].kill9()
    for r in (0, 1):
        res = result_of(procs[r], 10)
        assert res["status"] in ("EUNREACHABLE", "ETIMEDOUT", "EMEMBERSHIP"), f"rank {r}: {res}"
        assert res["status"] == "EMEMBERSHIP" or "rank 2" in res["msg"], res
        line = procs[r].wait_line(lambda l: l.startswith("REGROUPED"), 20, "REGROUPED")
        kv = parse_kv(line)
        assert kv["status"] == "REGROUPED" and kv["world"] == 2, line
        line = procs[r].wait_line(lambda l: l.startswith("SUM"), 10, "SUM")
        assert parse_kv(line.split(" msg=")[0]) == {"status": "OK", "value": 3}, line
    print(f"  rank 0: {result_of(procs[0], 1)['status']}, then {line}")


def test_steps_on_ps_backend(h):
    coord = h.coordinator()
    for i in range(2):
        h.shard(coord, f"s{i}")
    wait_for(lambda: sum(1 for s in h.ctl_json(coord.endpoint, "shards")["shards"]
                         if s.get("alive")) == 2, 10, "two live shards")
    procs = start_ranks(h, coord, "ps", 2, ["--scenario", "steps"],
                        env={"TETHER_BACKEND": "ps"})
    for r, p in enumerate(procs):
        assert p.wait(60) == 0, f"rank {r}: " + " | ".join(p.lines()[-6:])
        line = [l for l in p.lines() if l.startswith("OK buckets")]
        assert line and "backend=ps" in line[0], p.lines()
    print(f"  {line[0][3:]}")


def test_auto_agrees_without_an_endpoint(h):
    """Rank 1 of 3 advertises no ring endpoint: every rank, not only its
    neighbours, must see that no ring can be built and take the shards
    (`auto`), or they would wait on each other in different backends until
    the deadline. The audit's plain collectives then have no ring, so it
    is off here; the steps' sums must still be exact."""
    coord = h.coordinator()
    h.shard(coord, "s0")
    wait_for(lambda: any(s.get("alive") for s in h.ctl_json(coord.endpoint, "shards")["shards"]),
             10, "a live shard")
    t0 = time.monotonic()
    procs = start_ranks(h, coord, "noep", 3, ["--scenario", "steps"],
                        env={"TETHER_BACKEND": "auto", "TETHER_AUDIT_EVERY": "0",
                             "TETHER_COLL_DEADLINE_MS": "20000"},
                        env_of=lambda i: {"TETHER_ENDPOINT": ""} if i == 1 else {})
    for r, p in enumerate(procs):
        assert p.wait(60) == 0, f"rank {r}: " + " | ".join(p.lines()[-6:])
        line = [l for l in p.lines() if l.startswith("OK buckets")]
        assert line and "backend=ps" in line[0], p.lines()
    took = time.monotonic() - t0
    assert took < 15, f"{took:.1f} s: some rank waited for a ring"
    print(f"  3 ranks, rank 1 without an endpoint: all on the shards in {took:.1f} s")


def test_ps_waits_for_a_late_shard(h):
    """Workers that form a ps job before any shard server has registered
    (systemd or Kubernetes start them in any order) wait for one instead of
    failing the generation."""
    coord = h.coordinator()
    procs = start_ranks(h, coord, "late", 2, ["--scenario", "steps"],
                        env={"TETHER_BACKEND": "ps"})
    time.sleep(1.0)
    h.shard(coord, "s-late")
    for r, p in enumerate(procs):
        assert p.wait(60) == 0, f"rank {r}: " + " | ".join(p.lines()[-6:])
        assert any(l.startswith("OK buckets") for l in p.lines()), p.lines()


def test_shard_wait_is_the_workers_choice(h):
    """TETHER_SHARD_WAIT_MS bounds how long the ps backend waits for shard
    servers: 1.5 s without any fails the first step soon after, naming
    the shards; 20 s outlasts the 10 s default for a shard that comes
    after 11 s (a shard pod scheduled late)."""
    coord = h.coordinator()
    procs = start_ranks(h, coord, "none", 1, ["--scenario", "steps"],
                        env={"TETHER_BACKEND": "ps", "TETHER_SHARD_WAIT_MS": "1500"})
    t0 = time.monotonic()
    assert procs[0].wait(30) != 0, "a ps step without any shard server succeeded"
    took = time.monotonic() - t0
    text = " | ".join(procs[0].lines()[-8:])
    assert took < 8, f"gave up after {took:.1f} s, not about 1.5 s: {text}"
    assert "shard" in text, text
    print(f"  1.5 s wait, no shard: failed after {took:.1f} s")
    procs = start_ranks(h, coord, "slow", 2, ["--scenario", "steps"],
                        env={"TETHER_BACKEND": "ps", "TETHER_SHARD_WAIT_MS": "20000"})
    time.sleep(11.0)
    h.shard(coord, "s-slow")
    for r, p in enumerate(procs):
        assert p.wait(60) == 0, f"rank {r}: " + " | ".join(p.lines()[-6:])
        assert any(l.startswith("OK buckets") for l in p.lines()), p.lines()
    print("  20 s wait: the shard that came after 11 s was used")


if __name__ == "__main__":
    run_tests([test_correctness_w1_to_w4, test_desync_names_both_sides,
               test_sigstop_times_out_naming_rank, test_kill_then_rebuild_on_new_generation,
               test_steps_on_ps_backend, test_auto_agrees_without_an_endpoint,
               test_ps_waits_for_a_late_shard,
               test_shard_wait_is_the_workers_choice])
