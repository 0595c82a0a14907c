#!/usr/bin/env python3
"""Coordinator integration tests: real tether-coordinator, real worker
processes (tt_testclient, linking libtether) and tetherctl on 127.0.0.1,
killed for real with SIGKILL/SIGSTOP."""
import os
import signal
import socket
import struct
import time

from tt_harness import binary, parse_kv, run_tests, wait_for

HB_MS, HB_TIMEOUT_MS = 200, 1000


def worker(h, coord, wid, job="job1", n=8, extra=(), env=None, name=None):
    e = {"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": job, "TETHER_WORKER_ID": wid,
         "TETHER_MIN_WORKERS": str(n), "TETHER_MAX_WORKERS": str(n),
         "TETHER_LAST_CALL_MS": "300", "TETHER_HEARTBEAT_MS": str(HB_MS),
         "TETHER_HEARTBEAT_TIMEOUT_MS": str(HB_TIMEOUT_MS), "TETHER_JOIN_TIMEOUT_MS": "20000",
         "TETHER_LOG": "info"}
    e.update(env or {})
    argv = [binary("tt_testclient"), "--print", "--run-ms", "600000", *extra]
    return h.spawn(name or wid, argv, env=e)


def start_job(h, n=8, job="job1", extra=(), min_workers=None):
    coord = h.coordinator()
    env = {"TETHER_MIN_WORKERS": str(min_workers)} if min_workers else None
    ws = [worker(h, coord, f"w{i}", job, n, extra, env) for i in range(n)]
    joined = [parse_kv(w.wait_line(lambda l: l.startswith("JOINED"), 20, "JOINED")) for w in ws]
    return coord, ws, joined


def latest_generation(w):
    gens = [parse_kv(l) for l in w.lines() if l.startswith(("JOINED", "GENERATION", "REJOINED"))]
    return gens[-1] if gens else None


def test_eight_workers_join(h):
    coord, ws, joined = start_job(h)
    assert sorted(j["rank"] for j in joined) == list(range(8)), joined
    assert {j["gen"] for j in joined} == {joined[0]["gen"]}, "one generation for all"
    assert all(j["world"] == 8 for j in joined)
    # ranks are assigned by sorting worker ids
    for i, j in enumerate(joined):
        assert j["rank"] == i, f"w{i} got rank {j['rank']}"
    members = h.ctl_json(coord.endpoint, "members", "job1")
    got = {m["worker_id"]: m["rank"] for m in members["members"]}
    assert got == {f"w{i}": i for i in range(8)}, got
    assert members["generation"] == joined[0]["gen"]
    status = h.ctl_json(coord.endpoint, "status")
    job = [j for j in status["jobs"] if j["job_id"] == "job1"][0]
    assert job["members"] == 8 and job["generation"] == joined[0]["gen"], job


def test_kill9_forms_next_generation(h):
    coord, ws, joined = start_job(h, extra=(), min_workers=4)
    g = joined[0]["gen"]
    t0 = time.monotonic()
    ws[3].kill9()
    survivors = [w for i, w in enumerate(ws) if i != 3]
    for w in survivors:
        line = w.wait_line(lambda l: l.startswith("GENERATION") and parse_kv(l)["gen"] > g,
                           HB_TIMEOUT_MS / 1000 + 1, "GENERATION g+1 after kill -9")
        kv = parse_kv(line)
        assert kv["gen"] == g + 1 and kv["world"] == 7, line
    took = time.monotonic() - t0
    ranks = sorted(latest_generation(w)["rank"] for w in survivors)
    assert ranks == list(range(7)), ranks
    print(f"  7 survivors at generation {g + 1} {took:.2f} s after kill -9")


def test_sigstop_fenced_then_rejoins(h):
    coord, ws, joined = start_job(h, n=4, extra=("--rejoin-on-fence",), min_workers=2)
    g = joined[0]["gen"]
    before = h.ctl_json(coord.endpoint, "members", "job1")
    inc_before = [m["incarnation"] for m in before["members"] if m["worker_id"] == "w1"][0]
    ws[1].signal(signal.SIGSTOP)
    for i in (0, 2, 3):
        ws[i].wait_line(lambda l: l.startswith("GENERATION") and parse_kv(l)["gen"] == g + 1,
                        HB_TIMEOUT_MS / 1000 + 2, "eviction of the stopped worker")
    members = h.ctl_json(coord.endpoint, "members", "job1")
    assert "w1" not in [m["worker_id"] for m in members["members"]], members
    ws[1].signal(signal.SIGCONT)
    ws[1].wait_line(lambda l: l.startswith("FENCED"), 10, "FENCED after SIGCONT")
    line = ws[1].wait_line(lambda l: l.startswith("REJOINED"), 15, "REJOINED as a new member")
    kv = parse_kv(line)
    assert kv["gen"] > g + 1 and kv["world"] == 4, line
    members = h.ctl_json(coord.endpoint, "members", "job1")
    w1 = [m for m in members["members"] if m["worker_id"] == "w1"]
    assert w1 and w1[0]["incarnation"] != inc_before, (inc_before, members)


def test_report_naming_no_peer(h):
    """A failure report that names no peer (an NCCL worker's: NCCL says a
    peer failed, not which) evicts the member that is gone at once, long
    before its heartbeat timeout, and no living member: their next
    heartbeats clear the suspicion."""
    coord = h.coordinator()
    slow = {"TETHER_HEARTBEAT_TIMEOUT_MS": "30000",  # only a report evicts in time
            "TETHER_MIN_WORKERS": "2"}
    ws = [worker(h, coord, f"w{i}", n=4, env=slow) for i in range(4)]
    g = max(parse_kv(w.wait_line(lambda l: l.startswith("JOINED"), 20, "JOINED"))["gen"]
            for w in ws)
    wait_for(lambda: all(latest_generation(w)["gen"] == g for w in ws), 10, "one generation")
    ws[2].kill9()
    t0 = time.monotonic()
    ws[0].signal(signal.SIGUSR1)
    ws[0].wait_line(lambda l: l.startswith("REPORTED"), 5, "the report's answer")
    assert "REPORTED OK" in ws[0].lines(), ws[0].lines()[-3:]
    for i in (0, 1, 3):
        line = ws[i].wait_line(lambda l: l.startswith("GENERATION") and parse_kv(l)["gen"] > g,
                               10, "the next generation, within a third of the heartbeat timeout")
        assert parse_kv(line)["world"] == 3, line
    took = time.monotonic() - t0
    log = coord.lines("log")
    why = [l for l in log if "evicted w2" in l]
    assert why and "naming no peer" in why[0], why or log[-10:]
    assert not [l for l in log if "evicted w0" in l or "evicted w1" in l or "evicted w3" in l]
    # the same report with everyone alive evicts nobody
    ws[1].signal(signal.SIGUSR1)
    ws[1].wait_line(lambda l: l.startswith("REPORTED"), 5, "the second report's answer")
    coord.wait_line(lambda l: "suspicion of w3 cleared by its heartbeat" in l, 5,
                    "a living suspect cleared", "log")
    time.sleep(5 * HB_MS / 1000)  # room for a wrong eviction to show
    status = h.ctl_json(coord.endpoint, "status")["jobs"][0]
    assert status["generation"] == g + 1 and status["members"] == 3, status
    print(f"  w2 evicted {took:.2f} s after kill -9 on a report naming no peer "
          f"(heartbeat timeout 30 s); living suspects cleared")


def test_coordinator_restart(h):
    coord, ws, joined = start_job(h, n=4, min_workers=2)
    g = joined[0]["gen"]
    coord.kill9()
    time.sleep(0.5)
    coord2 = h.coordinator(port=coord.port, name="coord2")
    # survivors re-register: their heartbeats are accepted and they stay members
    wait_for(lambda: h.ctl_json(coord2.endpoint, "members", "job1")["generation"] == g and all(
        m["heartbeat_age_ms"] < 1000 for m in h.ctl_json(coord2.endpoint, "members",
                                                         "job1")["members"]),
             10, "restored members heartbeating again")
    assert all(w.alive() for w in ws)
    assert not any(l.startswith("FENCED") for w in ws for l in w.lines())
    # the generation counter survived: the next regroup goes beyond g
    ws[0].kill9()
    for w in ws[1:]:
        w.wait_line(lambda l: l.startswith("GENERATION") and parse_kv(l)["gen"] == g + 1,
                    HB_TIMEOUT_MS / 1000 + 2, "generation g+1 after restart")
    status = h.ctl_json(coord2.endpoint, "status")
    assert status["jobs"][0]["generation"] == g + 1, status


def test_coordinator_stopped_evicts_nobody(h):
    """The coordinator's process stands still (SIGSTOP, as a paused VM or a
    host swapping) for three heartbeat timeouts. The members' and the
    shard's heartbeats of that time wait unread in its socket: it must not
    take them for dead when it runs again, and the members say meanwhile
    that it is silent."""
    coord = h.coordinator(extra=("--shard-timeout-ms", str(HB_TIMEOUT_MS)))
    shard = h.shard(coord)
    ws = [worker(h, coord, f"w{i}", n=3) for i in range(3)]
    g = parse_kv(ws[0].wait_line(lambda l: l.startswith("JOINED"), 20, "JOINED"))["gen"]
    def shard_alive():
        return [x["alive"] for x in h.ctl_json(coord.endpoint, "shards")["shards"]] == [True]

    wait_for(shard_alive, 10, "the shard registered")
    coord.signal(signal.SIGSTOP)
    time.sleep(3 * HB_TIMEOUT_MS / 1000)
    coord.signal(signal.SIGCONT)
    note = coord.wait_line(lambda l: "stood still for" in l, 5, "the stall noticed", "log")
    time.sleep(2 * HB_TIMEOUT_MS / 1000)  # room for a wrong eviction to show
    log = coord.lines("log")
    assert not [l for l in log if "evicted" in l or "lost" in l], \
        [l for l in log if "evicted" in l or "lost" in l]
    status = h.ctl_json(coord.endpoint, "status")["jobs"][0]
    assert status["generation"] == g and status["members"] == 3, status
    assert shard_alive()
    for w in ws:
        assert not [l for l in w.lines() if l.startswith(("FENCED", "GENERATION"))], w.lines()
        wlog = w.lines("log")
        assert any("no answer from the coordinator" in l for l in wlog), wlog[-5:]
        assert any("answers again after" in l for l in wlog), wlog[-5:]
    assert shard.alive()
    print("  " + note[note.index("this process"):])


def zmtp_greeting_then(payload):
    """A raw TCP peer that speaks a ZMTP 3.0 greeting and then sends junk."""
    greet = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + \
        b"\x00" * 31
    return greet + payload


def test_garbage_and_oversized(h):
    coord = h.coordinator(extra=("--max-msg-bytes", "65536"))
    for payload in (os.urandom(4096), b"GET / HTTP/1.1\r\n\r\n",
                    zmtp_greeting_then(os.urandom(512)),
                    zmtp_greeting_then(b"\x02" + struct.pack(">Q", 1 << 40))):
        with socket.create_connection(("127.0.0.1", coord.port), timeout=5) as s:
            try:
                s.sendall(payload)
                time.sleep(0.1)
            except OSError:
                pass
    # an oversized but well-formed frame from a real ZeroMQ peer is refused
    big = h.spawn("bigsender", [binary("tt_testclient"), "--send-oversized", "131072"],
                  env={"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": "junk",
                       "TETHER_WORKER_ID": "big"})
    big.wait(20)
    assert coord.alive(), "coordinator died on garbage"
    h.ctl(coord.endpoint, "status")
    # and it still runs a job
    ws = [worker(h, coord, f"v{i}", "job2", 2) for i in range(2)]
    for w in ws:
        w.wait_line(lambda l: l.startswith("JOINED"), 20, "JOINED after garbage")


def test_settings_conflict_and_unreachable(h):
    coord = h.coordinator()
    w0 = worker(h, coord, "a", "job3", 2)
    wait_for(lambda: any(j["job_id"] == "job3" for j in h.ctl_json(coord.endpoint,
                                                                  "status")["jobs"]),
             10, "job3 created by the first join")
    bad = worker(h, coord, "b", "job3", 3, name="bad")
    line = bad.wait_line(lambda l: l.startswith("ERROR"), 10, "settings conflict error")
    assert "ECONFLICT" in line and "min_workers" in line, line
    assert w0.alive()
    port = coord.port
    coord.kill9()
    t0 = time.monotonic()
    # a refused port is said at once, well within --timeout-ms
    rc, out, err = h.ctl(f"tcp://127.0.0.1:{port}", "status", check=False, timeout_ms=20000)
    took = time.monotonic() - t0
    assert rc != 0 and "cannot reach" in err and "nothing accepts connections" in err, (rc, err)
    assert took < 10, took
    print(f"  tetherctl on the dead coordinator's port: exit {rc} after {took:.2f} s")


def test_rank0_that_never_offers_is_named(h):
    """An NCCL init that cannot start because rank 0 never offers the
    generation's collective id (stuck before ncclGetUniqueId, say): the
    member asking for it is held by the coordinator, tetherctl status
    names rank 0, the coordinator logs one line naming it after 10 s, and
    killing rank 0 ends the member's wait at once, not at its deadline."""
    coord, ws, joined = start_job(h, n=2, extra=("--fetch-comm-id", "60000"), min_workers=1)
    assert [j["rank"] for j in joined] == [0, 1], joined
    t0 = time.monotonic()

    def waiting():
        job = [j for j in h.ctl_json(coord.endpoint, "status")["jobs"] if j["job_id"] == "job1"]
        return job[0] if job and job[0]["comm_id_waiting"] == 1 else None
    wait_for(waiting, 10, "status: one member waiting for the collective id")
    job = waiting()
    assert job["comm_id_from"] == "w0", job
    out = h.ctl(coord.endpoint, "status")[1]
    line = [l for l in out.splitlines() if "collective id" in l]
    assert line and "1 member(s) waiting" in line[0] and "rank 0 (w0)" in line[0], out
    print(f"  tetherctl status: {line[0]}")
    note = coord.wait_line(lambda l: "for its collective id" in l, 15, "the coordinator's note",
                           stream="log")
    assert "1 member(s) of generation" in note and "rank 0 (w0 on " in note, note
    print(f"  after {time.monotonic() - t0:.1f} s: {note.split(' coord ', 1)[-1]}")
    ws[0].kill9()
    t1 = time.monotonic()
    line = ws[1].wait_line(lambda l: l.startswith("COMMID"), HB_TIMEOUT_MS / 1000 + 5,
                           "the wait's end")
    assert line.startswith("COMMID ESTALE"), line
    print(f"  rank 1's wait ended {time.monotonic() - t1:.1f} s after rank 0's kill -9: {line}")
    wait_for(lambda: h.ctl_json(coord.endpoint, "status")["jobs"][0]["comm_id_waiting"] == 0, 5,
             "nobody waiting once the generation ended")


if __name__ == "__main__":
    run_tests([test_eight_workers_join, test_kill9_forms_next_generation,
               test_sigstop_fenced_then_rejoins, test_report_naming_no_peer, test_coordinator_restart,
               test_coordinator_stopped_evicts_nobody, test_garbage_and_oversized, test_settings_conflict_and_unreachable,
               test_rank0_that_never_offers_is_named])
