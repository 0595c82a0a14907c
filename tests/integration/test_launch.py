#!/usr/bin/env python3
"""tether-launch integration tests: the real launcher starts a real
tether-coordinator and tt_testclient workers (or small shell wrappers around
it) on 127.0.0.1; the tests check the prefixed output, restarts, exit
statuses, the daemons' HTTP endpoints (--http-port), and that no process it
started outlives it, whether it is stopped with SIGTERM or killed with
SIGKILL."""
import os
import re
import signal
import time
import urllib.request
import uuid

from tt_harness import binary, free_port, run_tests, wait_for

STEPS = ("--steps", "20", "--step-ms", "50", "--print")


def launch(h, args, program, name="launch", env=None):
    """Starts tether-launch ARGS -- PROGRAM; every process it starts carries
    a unique TT_LAUNCH_TEST_MARKER in its environment."""
    marker = uuid.uuid4().hex
    e = {"TT_LAUNCH_TEST_MARKER": marker, "TETHER_HEARTBEAT_MS": "200",
         "TETHER_HEARTBEAT_TIMEOUT_MS": "1000", "TETHER_LAST_CALL_MS": "200",
         "TETHER_JOIN_TIMEOUT_MS": "30000", "TMPDIR": h.dir}
    e.update(env or {})
    p = h.spawn(name, [binary("tether-launch"), "--grace-ms", "5000", *args, "--", *program],
                env=e)
    p.marker = marker
    return p


def err_lines(p):
    with open(p.log_path, "r", errors="replace") as f:
        return f.read().splitlines()


def wrapper(h, body):
    """A worker program: a shell script in the test's temp dir."""
    path = os.path.join(h.dir, f"worker-{uuid.uuid4().hex[:6]}.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def marked_pids(marker):
    """Live (non-zombie) processes whose environment carries the marker."""
    found = []
    needle = f"TT_LAUNCH_TEST_MARKER={marker}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(d))
    return found


def started_pids(p):
    pat = re.compile(r"^\[launch\] started (.+): pid (\d+),")
    return {m.group(1): int(m.group(2)) for m in map(pat.match, err_lines(p)) if m}


def summary(p):
    lines = [l for l in err_lines(p) if l.startswith("[launch] summary:")]
    assert lines, "no summary line"
    return dict(kv.split("=", 1) for kv in lines[-1].split()[2:])


def test_three_workers_complete(h):
    p = launch(h, ["--workers", "3"], [binary("tt_testclient"), *STEPS])
    assert p.wait(60) == 0, err_lines(p)[-10:]
    out = p.lines()
    assert out and all(re.match(r"^\[worker [0-2]\] ", l) for l in out), out[:5]
    for i in range(3):
        mine = [l for l in out if l.startswith(f"[worker {i}] ")]
        assert mine[0].startswith(f"[worker {i}] JOINED") and "world=3" in mine[0], mine[:2]
        assert f"[worker {i}] STEP 19" in mine and mine[-1] == f"[worker {i}] DONE", mine[-3:]
    err = err_lines(p)
    assert all(re.match(r"^\[(coord|launch|worker [0-2])\] ", l) for l in err), \
        [l for l in err if not l.startswith("[")][:3]
    assert any(l.startswith("[coord] ") for l in err), "coordinator output is prefixed"
    s = summary(p)
    assert s["workers"] == "3" and s["finished"] == "3" and s["exit"] == "0", s
    assert marked_pids(p.marker) == []
    assert not [d for d in os.listdir(h.dir) if d.startswith("tether-launch-")], \
        "the temporary state dir is removed"


def test_worker_crash_restarted(h):
    prog = wrapper(h, 'if [ "$TETHER_LOCAL_RANK" = 1 ] && [ "$TETHER_LAUNCH_RESTART" = 0 ]; then\n'
                      '  echo "worker-1 crashing on purpose" >&2; exit 1\nfi\n'
                      f'exec {binary("tt_testclient")} "$@"')
    p = launch(h, ["--workers", "3", "--max-restarts", "2"], [prog, *STEPS])
    assert p.wait(60) == 0, err_lines(p)[-10:]
    err = err_lines(p)
    assert "[worker 1] worker-1 crashing on purpose" in err, err
    assert any(l.startswith("[launch] worker 1 exited (exit code 1); restart 1") for l in err), err
    assert p.lines()[-1].endswith("DONE")
    assert [l for l in p.lines() if l.startswith("[worker 1] DONE")], "restarted worker finished"
    s = summary(p)
    assert s["restarts"] == "1" and s["finished"] == "3" and s["exit"] == "0", s


def test_worker_killed_midrun_rejoins(h):
    p = launch(h, ["--workers", "3", "--min-workers", "2"],
               [binary("tt_testclient"), "--steps", "40", "--step-ms", "50", "--print"])
    p.wait_line(lambda l: l == "[worker 1] STEP 3", 30, "worker 1 at step 3")
    os.kill(started_pids(p)["worker 1"], signal.SIGKILL)
    assert p.wait(60) == 0, err_lines(p)[-10:]
    out = p.lines()
    joins = [l for l in out if l.startswith("[worker 1] JOINED")]
    assert len(joins) == 2, joins  # the restarted process joined again
    gen0 = int(re.search(r"gen=(\d+)", joins[0]).group(1))
    regroups = [l for l in out if l.startswith("[worker 0] GENERATION")]
    assert regroups and int(re.search(r"gen=(\d+)", regroups[0]).group(1)) > gen0, regroups
    assert any(l.startswith("[launch] worker 1 exited (killed by signal 9 (SIGKILL)); restart 1")
               for l in err_lines(p))
    s = summary(p)
    assert s["restarts"] == "1" and s["finished"] == "3" and s["exit"] == "0", s


def test_restarts_exhausted(h):
    prog = wrapper(h, 'if [ "$TETHER_LOCAL_RANK" = 2 ]; then exit 3; fi\n'
                      f'exec {binary("tt_testclient")} "$@"')
    p = launch(h, ["--workers", "3", "--max-restarts", "2"],
               [prog, "--run-ms", "600000", "--print"])
    rc = p.wait(60)
    err = err_lines(p)
    assert rc == 3, (rc, err[-10:])
    assert "[launch] job failed: worker 2 failed: exit code 3 (restart budget of 2 used up)" \
        in err, err[-10:]
    s = summary(p)
    assert s["restarts"] == "2" and s["exit"] == "3", s
    # The survivors cannot reach min-workers 3 any more: the job is stopped.
    assert "[launch] coordinator stopped (exit code 0)" in err, err[-6:]
    assert marked_pids(p.marker) == []


def test_usage_error_not_restarted(h):
    """tether-train refuses a bad flag with exit 2, the usage-error
    convention; a restart would print the same refusal, so the launcher
    fails the job at once and keeps its restart budget."""
    p = launch(h, ["--workers", "3", "--max-restarts", "5"],
               [binary("tether-train"), "--epochs", "0"])
    rc = p.wait(60)
    err = err_lines(p)
    assert rc == 2, (rc, err[-10:])
    refusals = [l for l in err if "bad value '0' for --epochs" in l]
    assert 1 <= len(refusals) <= 3, refusals  # once per worker at most
    assert any(re.match(r"^\[launch\] worker [0-2] failed \(exit code 2\): not restarted, "
                        r"since a restart would only repeat a usage or configuration error "
                        r"\(--no-restart-code 2\)$",
                        l) for l in err), err[-10:]
    assert any(re.match(r"^\[launch\] job failed: worker [0-2] failed: exit code 2 \(a usage or "
                        r"configuration error, which a restart would repeat\)$", l)
               for l in err), err[-10:]
    assert not [l for l in err if " restart 1 (" in l], err
    s = summary(p)
    assert s["restarts"] == "0" and s["exit"] == "2", s
    assert marked_pids(p.marker) == []

    # --no-restart-code 0: exit 2 is restarted like any failure.
    prog = wrapper(h, 'if [ "$TETHER_LOCAL_RANK" = 1 ] && [ "$TETHER_LAUNCH_RESTART" = 0 ]; then\n'
                      '  exit 2\nfi\n'
                      f'exec {binary("tt_testclient")} "$@"')
    p = launch(h, ["--workers", "2", "--no-restart-code", "0"], [prog, *STEPS], name="launch0")
    assert p.wait(60) == 0, err_lines(p)[-10:]
    assert any(l.startswith("[launch] worker 1 exited (exit code 2); restart 1")
               for l in err_lines(p))
    assert summary(p)["restarts"] == "1"


def start_idle_job(h, n=3, args=()):
    p = launch(h, ["--workers", str(n), *args], [binary("tt_testclient"), "--run-ms", "600000",
                                                 "--print"])
    wait_for(lambda: len([l for l in p.lines() if " JOINED " in l]) == n, 30, "all joined")
    pids = started_pids(p)
    assert len(pids) == n + 1, pids
    assert sorted(set(marked_pids(p.marker)) - {p.pid}) == sorted(pids.values())
    return p, pids


def test_sigterm_stops_everything(h):
    p, pids = start_idle_job(h)
    t0 = time.monotonic()
    p.signal(signal.SIGTERM)
    rc = p.wait(30)
    took = time.monotonic() - t0
    assert rc == 128 + signal.SIGTERM, rc
    assert marked_pids(p.marker) == [], "no process outlives the launcher"
    err = err_lines(p)
    assert "[launch] coordinator stopped (exit code 0)" in err, err[-8:]
    # workers leave on SIGTERM (exit 0) before the daemons are stopped
    last_worker = max(i for i, l in enumerate(err) if re.match(r"\[launch\] worker \d", l))
    assert last_worker < err.index("[launch] coordinator stopped (exit code 0)")
    print(f"  stopped 3 workers and the coordinator in {took:.2f} s")


def test_coordinator_restarted_on_same_port(h):
    p, pids = start_idle_job(h, args=("--daemon-log-level", "info"))
    os.kill(pids["coordinator"], signal.SIGKILL)
    wait_for(lambda: len([l for l in err_lines(p) if l.startswith("[launch] started coordinator")])
             == 2, 10, "coordinator restarted")
    err = err_lines(p)
    ports = re.findall(r"started coordinator: pid \d+, port (\d+)", "\n".join(err))
    assert len(ports) == 2 and ports[0] == ports[1], ports
    assert any(l.startswith("[launch] coordinator died (killed by signal 9 (SIGKILL))")
               for l in err), err[-5:]
    # the new coordinator reloaded the job from the same state dir
    wait_for(lambda: any(l.startswith("[coord] ") and "restored job launch at generation" in l
                         for l in err_lines(p)), 10, "coordinator restores the job")
    p.signal(signal.SIGTERM)
    assert p.wait(30) == 128 + signal.SIGTERM
    assert summary(p)["daemon-restarts"] == "1"
    assert marked_pids(p.marker) == []


def test_sigkill_takes_children_down(h):
    p, pids = start_idle_job(h)
    p.kill9()
    wait_for(lambda: marked_pids(p.marker) == [], 10, "children die with the launcher")


def test_sigterm_during_startup_with_stuck_worker(h):
    # Workers that ignore SIGTERM are SIGKILLed after the grace period; the
    # coordinator then still gets a SIGTERM (and saves its state).
    prog = wrapper(h, "trap '' TERM\necho ignoring-sigterm\nwhile :; do sleep 0.1; done")
    p = launch(h, ["--workers", "2"], [prog], env={})
    wait_for(lambda: len([l for l in p.lines() if l.endswith("] ignoring-sigterm")]) == 2, 20,
             "both workers ignore SIGTERM")
    p.signal(signal.SIGINT)
    assert p.wait(30) == 128 + signal.SIGINT
    err = err_lines(p)
    assert "[launch] grace period of 5000 ms over: killing 2 remaining worker(s)" in err, err[-6:]
    assert "[launch] coordinator stopped (exit code 0)" in err, err[-6:]
    assert marked_pids(p.marker) == []


FAKE_SHARD = r'''
import signal, socket, sys
args = sys.argv[1:]
opt = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2)}
host, port = opt["--listen"].rsplit("/", 1)[1].rsplit(":", 1)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, int(port)))
s.listen(16)
print("ARGS " + " ".join(args), flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    s.accept()[0].close()
'''


def test_shards_started_before_workers(h):
    # tether-shard stands in as a small TCP listener that prints its flags.
    shard = wrapper(h, f"exec python3 -u -c '{FAKE_SHARD}' \"$@\"")
    p = launch(h, ["--workers", "2", "--shards", "2", "--shard-bin", shard,
                   "--state-dir", os.path.join(h.dir, "state")],
               [binary("tt_testclient"), *STEPS])
    assert p.wait(60) == 0, err_lines(p)[-10:]
    err = err_lines(p)
    coord = re.search(r"started coordinator: pid \d+, port (\d+)", "\n".join(err)).group(1)
    for k in range(2):
        out = [l for l in p.lines() if l.startswith(f"[shard {k}] ARGS ")]
        assert len(out) == 1, p.lines()
        assert f"--coordinator tcp://127.0.0.1:{coord}" in out[0], out
        assert f"--id s{k}" in out[0] and "--listen tcp://127.0.0.1:" in out[0], out
        ready = err.index(next(l for l in err if l.startswith(f"[launch] shard {k} is accepting")))
        first_worker = err.index(next(l for l in err if l.startswith("[launch] started worker")))
        assert ready < first_worker, "workers start after every shard accepts connections"
        assert f"[launch] shard {k} stopped (exit code 0)" in err
    # an explicit --state-dir is kept
    assert os.path.isdir(os.path.join(h.dir, "state", "coordinator"))


def test_real_shards(h):
    try:
        binary("tether-shard")
    except FileNotFoundError:
        print("  SKIP: tether-shard is not built")
        return
    p = launch(h, ["--workers", "2", "--shards", "2", "--daemon-log-level", "info"],
               [binary("tt_testclient"), *STEPS])
    assert p.wait(60) == 0, err_lines(p)[-10:]
    err = err_lines(p)
    for k in range(2):
        assert any(l.startswith(f"[shard {k}] ") for l in err + p.lines()), "shard output"
        assert f"[launch] shard {k} stopped (exit code 0)" in err, err[-8:]
    assert summary(p)["exit"] == "0"
    assert marked_pids(p.marker) == []


def test_http_endpoints(h):
    """--http-port P: the coordinator serves /metrics on 127.0.0.1:P and
    each shard on a free port named in its 'started' line; the metrics
    show the launcher's job while it runs."""
    try:
        binary("tether-shard")
    except FileNotFoundError:
        print("  SKIP: tether-shard is not built")
        return
    port = free_port()
    p = launch(h, ["--workers", "2", "--shards", "1", "--http-port", str(port)],
               [binary("tt_testclient"), "--run-ms", "600000", "--print"])
    wait_for(lambda: len([l for l in p.lines() if " JOINED " in l]) == 2, 30, "all joined")

    def get(url):
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    text = get(f"http://127.0.0.1:{port}/metrics")
    assert 'tether_job_members{job="launch"} 2' in text, text[-800:]
    lines = [l for l in err_lines(p) if l.startswith("[launch] started shard 0:")]
    m = re.search(r"metrics (http://\S+)", lines[0]) if lines else None
    assert m, lines
    assert "tether_shard_up" in get(m.group(1)), m.group(1)
    print(f"  coordinator http://127.0.0.1:{port}/metrics; shard 0 {m.group(1)}")
    p.signal(signal.SIGTERM)
    assert p.wait(30) is not None
    assert marked_pids(p.marker) == []


def cpu_list(text):
    """ "0-2,5" -> {0, 1, 2, 5}"""
    cpus = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def test_workers_bound_to_cpus(h):
    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        print("  SKIP: one CPU allowed here, binding changes nothing")
        return
    prog = wrapper(h, 'grep Cpus_allowed_list /proc/self/status\n'
                      'echo "omp=${OMP_NUM_THREADS:-unset}"')
    cases = (("cores", 1), ("cores", 2), ("cores", 2 * len(mine) + 1), ("none", 2))
    for bind, nworkers in cases:
        p = launch(h, ["--workers", str(nworkers), "--bind", bind], [prog], name=f"bind-{bind}",
                   env={"OMP_NUM_THREADS": None})
        assert p.wait(60) == 0, err_lines(p)[-10:]
        got, omp = {}, {}
        for l in p.lines():
            m = re.match(r"^\[worker (\d+)\] Cpus_allowed_list:\s*(\S+)$", l)
            if m:
                got[int(m.group(1))] = cpu_list(m.group(2))
            m = re.match(r"^\[worker (\d+)\] omp=(\S+)$", l)
            if m:
                omp[int(m.group(1))] = m.group(2)
        assert sorted(got) == list(range(nworkers)), p.lines()
        # OMP_NUM_THREADS, as torchrun sets it: the worker's share when
        # bound, 1 for several unbound workers
        want = {i: str(len(c)) if bind == "cores" else "1" for i, c in got.items()}
        assert omp == want, (omp, want)
        if bind == "none":
            assert all(c == mine for c in got.values()), got
            continue
        assert all(c and c <= mine for c in got.values()), (got, mine)
        assert set().union(*got.values()) == mine, "every allowed CPU gets a worker"
        if nworkers <= len(mine):
            assert sum(len(c) for c in got.values()) == len(mine), "disjoint shares"
        else:
            assert all(len(c) == 1 for c in got.values()), got
            # blocks: worker i and i + 1 share a CPU or move to the next one
            order = [min(got[i]) for i in range(nworkers)]
            assert order == sorted(order), order
        started = [l for l in err_lines(p) if l.startswith("[launch] started worker")]
        assert all(", CPUs " in l for l in started), started
    # a value the operator set is theirs
    p = launch(h, ["--workers", "2"], [prog], name="omp-set", env={"OMP_NUM_THREADS": "3"})
    assert p.wait(60) == 0, err_lines(p)[-10:]
    assert sorted(l for l in p.lines() if "omp=" in l) == \
        ["[worker 0] omp=3", "[worker 1] omp=3"], p.lines()


def test_bad_program_and_dying_coordinator(h):
    p = launch(h, ["--workers", "1"], ["/nonexistent/prog"], name="noprog")
    assert p.wait(20) == 2
    assert any("cannot find an executable /nonexistent/prog" in l for l in err_lines(p))
    p = launch(h, ["--workers", "1", "--coordinator-bin", "/bin/false"],
               [binary("tt_testclient")], name="badcoord")
    assert p.wait(30) == 1
    err = err_lines(p)
    assert any("job failed: coordinator keeps dying" in l for l in err), err[-5:]
    assert marked_pids(p.marker) == []
    # A daemon that exits 2 refused its configuration: no restart repeats it.
    bad = wrapper(h, 'echo "tether-coordinator: unknown flag --bogus" >&2; exit 2')
    p = launch(h, ["--workers", "1", "--coordinator-bin", bad], [binary("tt_testclient")],
               name="usagecoord")
    assert p.wait(30) == 1
    err = err_lines(p)
    assert "[launch] job failed: coordinator failed (exit code 2): not restarted, since a " \
        "restart would only repeat a usage or configuration error" in err, err[-5:]
    assert summary(p)["daemon-restarts"] == "0", err[-3:]


if __name__ == "__main__":
    run_tests([test_three_workers_complete, test_worker_crash_restarted,
               test_worker_killed_midrun_rejoins, test_restarts_exhausted,
               test_usage_error_not_restarted,
               test_sigterm_stops_everything, test_coordinator_restarted_on_same_port,
               test_sigkill_takes_children_down,
               test_sigterm_during_startup_with_stuck_worker, test_shards_started_before_workers,
               test_real_shards, test_http_endpoints, test_workers_bound_to_cpus,
               test_bad_program_and_dying_coordinator])
