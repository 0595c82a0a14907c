#!/usr/bin/env python3
"""Cluster-key integration tests (common/tt_zauth): a real coordinator and
real shard servers given a key file made by `tetherctl keygen`, and
coll_check workers on 127.0.0.1.

  * holders of the key run bucketed steps on the ring and on the shard
    servers, with bulk data authenticated (data = plain) and encrypted
    (data = curve), and tetherctl with the key answers;
  * a process without the key, or with another cluster's, is refused on
    both sides with a sentence saying which: tetherctl exits 1 naming it, a
    worker's join warns naming it, the coordinator and a shard server log
    the failed handshakes once per 10 s and count them in /metrics;
  * a key file others may read stops a daemon at start (exit 2), naming
    the file and the chmod;
  * tether-launch --key-file auto gives every child a fresh key.
"""
import os
import subprocess
import urllib.request

from tt_harness import binary, free_port, run_tests, wait_for
from test_collectives import start_ranks


def keygen(h, name, *flags):
    path = os.path.join(h.dir, name)
    r = subprocess.run([binary("tetherctl"), "keygen", path, *flags], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    assert "wrote a new cluster key" in r.stdout, r.stdout
    assert os.stat(path).st_mode & 0o777 == 0o600
    return path


class KeyEnv:
    """TETHER_KEY_FILE for the harness's children and tetherctl calls
    while the block runs (the harness reads os.environ)."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.old = os.environ.get("TETHER_KEY_FILE")
        os.environ["TETHER_KEY_FILE"] = self.path

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("TETHER_KEY_FILE", None)
        else:
            os.environ["TETHER_KEY_FILE"] = self.old


def ctl_as(endpoint, key):
    """tetherctl status with `key` (None: no key at all)."""
    env = {k: v for k, v in os.environ.items() if k != "TETHER_KEY_FILE"}
    argv = [binary("tetherctl"), "--coordinator", endpoint, "--timeout-ms", "2000", "status"]
    if key is not None:
        argv += ["--key-file", key]
    return subprocess.run(argv, capture_output=True, text=True, timeout=20, env=env)


def steps_on(h, coord, job, backend):
    procs = start_ranks(h, coord, job, 2, ["--scenario", "steps"],
                        env={"TETHER_BACKEND": backend})
    for r, p in enumerate(procs):
        assert p.wait(90) == 0, f"{job} rank {r}: " + " | ".join(p.lines()[-6:])
        assert [l for l in p.lines() if l.startswith("OK buckets")], p.lines()
    return procs


def keyed_cluster(h, nshards=2):
    coord = h.coordinator()
    shards = [h.shard(coord, f"s{i}") for i in range(nshards)]
    wait_for(lambda: sum(1 for s in h.ctl_json(coord.endpoint, "shards")["shards"]
                         if s.get("alive")) == nshards, 10, "live shards")
    return coord, shards


def check_holders(h, encrypt):
    key = keygen(h, "cluster.key", *(["--encrypt-data"] if encrypt else []))
    want = "security: CURVE" + ("" if encrypt else " (control), PLAIN (data)")
    with KeyEnv(key):
        coord, shards = keyed_cluster(h)
        for d in [coord, *shards]:
            wait_for(lambda: want in open(d.log_path).read(), 5, f"{d.name} logs '{want}'")
        for backend in ("ring", "ps"):
            steps_on(h, coord, backend, backend)
        assert ctl_as(coord.endpoint, key).returncode == 0
    for d in [coord, *shards]:
        text = open(d.log_path).read()
        assert "refused" not in text and "failed its handshake" not in text, text[-2000:]
    print(f"  ring and ps steps with {want}")


def test_holders_of_the_key_run_steps(h):
    check_holders(h, encrypt=False)


def test_holders_of_an_encrypting_key_run_steps(h):
    check_holders(h, encrypt=True)


def refused_metric(port, prefix):
    """The daemon's refused-connections counter line, which must be > 0."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    name = f"{prefix}_refused_connections_total "
    refused = [l for l in metrics.splitlines() if l.startswith(name)]
    assert refused and int(refused[0].split()[1]) > 0, refused
    return refused[0]


def test_strangers_are_refused_and_named(h):
    key, other = keygen(h, "cluster.key"), keygen(h, "other.key")
    http = free_port()
    with KeyEnv(key):
        coord = h.coordinator(extra=("--http", f"127.0.0.1:{http}"))
    r = ctl_as(coord.endpoint, None)
    assert r.returncode == 1 and ("disagree on security" in r.stderr or
                                  "another cluster key file" in r.stderr), r.stderr
    print(f"  no key: {r.stderr.strip()[-160:]}")
    r = ctl_as(coord.endpoint, other)
    assert r.returncode == 1 and "another cluster key file" in r.stderr, r.stderr
    print(f"  another key: {r.stderr.strip()[-120:]}")
    # A worker without the key: its join says why while it goes on trying.
    env = {"TETHER_COORDINATOR": coord.endpoint, "TETHER_JOB": "j", "TETHER_LOG": "warn",
           "TETHER_WORKER_ID": "stranger", "TETHER_KEY_FILE": None}
    w = h.spawn("stranger", [binary("coll_check"), "--scenario", "steps"], env=env)
    line = w.wait_line(lambda l: "disagree on security" in l or "another cluster key file" in l,
                       15, "the join's warning", stream="log")
    print(f"  worker: {line.strip()[-140:]}")
    w.kill9()
    log = open(coord.log_path).read()
    # once per 10 s: the first of the strangers above that ZeroMQ reported
    assert "failed its handshake" in log, log[-2000:]
    assert "has no cluster key file" in log or "another cluster's key file" in log, log[-2000:]
    print(f"  coordinator: {refused_metric(http, 'tether_coordinator')}")
    # The holder of the key is still served.
    assert ctl_as(coord.endpoint, key).returncode == 0
    # A shard's data port refuses and counts strangers too (tetherctl will
    # do as a client: it only has to connect). A mechanism mismatch (no key)
    # is seen by whichever side reads the other's greeting first, so the
    # shard may not see it; a CURVE key that cannot decrypt is seen by the
    # server alone: the shard gets the cluster's secret with data = curve.
    shttp = free_port()
    curve_key = os.path.join(h.dir, "cluster-curve.key")
    with open(key) as f:
        text = f.read().replace("data = plain", "data = curve")
    with open(os.open(curve_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(text)
    with KeyEnv(curve_key):
        shard = h.shard(coord, "s0", extra=("--http", f"127.0.0.1:{shttp}"))
    assert ctl_as(shard.endpoint, None).returncode == 1
    assert ctl_as(shard.endpoint, other).returncode == 1
    wait_for(lambda: "failed its handshake" in open(shard.log_path).read(), 5,
             "the shard logs the failed handshake")
    log = open(shard.log_path).read()
    assert "has no cluster key file" in log or "another cluster's key file" in log, log[-2000:]
    print(f"  shard: {refused_metric(shttp, 'tether_shard')}")


def test_a_key_file_others_may_read_stops_a_daemon(h):
    key = keygen(h, "cluster.key")
    os.chmod(key, 0o644)
    for exe, args in (("tether-coordinator", ["--listen", f"tcp://127.0.0.1:{free_port()}"]),
                      ("tether-shard", ["--listen", "tcp://127.0.0.1:0"])):
        r = subprocess.run([binary(exe), *args, "--key-file", key], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 2, (exe, r.returncode, r.stderr)
        assert "is open to others (mode 0644)" in r.stderr and "chmod 600" in r.stderr, r.stderr
    print(f"  {r.stderr.strip().splitlines()[-1]}")


def test_launch_makes_a_key_for_its_cluster(h):
    argv = [binary("tether-launch"), "--workers", "2", "--shards", "1", "--key-file", "auto",
            "--daemon-log-level", "info", "--", binary("coll_check"), "--scenario", "steps"]
    p = h.spawn("launch", argv, env={"TETHER_KEY_FILE": None, "TETHER_BACKEND": "ps"})
    assert p.wait(120) == 0, " | ".join(p.lines("log")[-10:])
    log = "\n".join(p.lines("log") + p.lines())
    assert "[launch] cluster key " in log and "tetherctl needs --key-file" in log, log[-2000:]
    assert log.count("security: CURVE (control), PLAIN (data)") >= 2, log[-2000:]
    oks = [l for l in p.lines() if "OK buckets" in l]
    assert len(oks) == 2 and all("backend=ps" in l for l in oks), oks


if __name__ == "__main__":
    run_tests([test_holders_of_the_key_run_steps, test_holders_of_an_encrypting_key_run_steps,
               test_strangers_are_refused_and_named, test_a_key_file_others_may_read_stops_a_daemon,
               test_launch_makes_a_key_for_its_cluster])
