#!/usr/bin/env python3
"""The daemons' HTTP endpoint (DESIGN.md §1; docs/operations.md): a real
tether-coordinator and two tether-shard daemons with --http, and two
tether-train workers of a PS job in optimizer mode that takes checkpoints,
on 127.0.0.1.

  * /metrics (Prometheus text format) follows the job: its state,
    generation, members and steps, every worker by rank, the committed
    checkpoints; each shard's chunks, bytes and rounds; every sample has
    its # TYPE; at the end the job shows as finished;
  * /healthz and /readyz answer 200; an unknown path 404, POST 405, a
    garbage request 400, a client that sends nothing does not hold up the
    next one (each connection has its own deadline);
  * a bad --http address or a port in use stops the daemon at start with a
    sentence naming it.
"""
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

from tt_harness import binary, free_port, run_tests, wait_for

DATA = os.environ.get("TETHER_FMNIST", "/usr/share/datasets/fashion-mnist")
ARGS = ["--layers", "784,64,10", "--train-limit", "2000", "--batch", "64", "--lr", "0.05",
        "--log-every", "0", "--seed", "7", "--epochs", "2", "--data", DATA,
        "--backend", "ps", "--update", "shards", "--pace-ms", "50",
        "--checkpoint-every-steps", "5"]
ENV = {"TETHER_HEARTBEAT_MS": "100", "TETHER_HEARTBEAT_TIMEOUT_MS": "2000",
       "TETHER_LAST_CALL_MS": "300", "TETHER_MIN_WORKERS": "2", "TETHER_MAX_WORKERS": "2",
       "TETHER_MIN_SHARDS": "2"}
SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (\S+)$')


def get(addr, path):
    """(status, body) of GET http://addr/path."""
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def raw(addr, data):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    return out.decode(errors="replace")


def metrics(addr):
    """{(name, labels): value} of /metrics, checking every sample's # TYPE."""
    status, text = get(addr, "/metrics")
    assert status == 200, (status, text)
    typed, out = set(), {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        assert m.group(1) in typed, f"{m.group(1)} has no # TYPE before it"
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def value(ms, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return ms.get((name, "{" + want + "}" if want else ""))


def shard(h, coord, sid):
    addr = f"127.0.0.1:{free_port()}"
    p = h.shard(coord, sid, extra=["--http", addr])
    p.http = addr
    return p


def test_metrics_follow_a_job(h):
    caddr = f"127.0.0.1:{free_port()}"
    coord = h.coordinator(extra=["--http", caddr])
    shards = [shard(h, coord, f"s{i}") for i in range(2)]
    root = os.path.join(h.dir, "ckpt")
    ws = []
    for i in range(2):
        env = dict(os.environ, **ENV, TETHER_COORDINATOR=coord.endpoint, TETHER_JOB="m",
                   TETHER_WORKER_ID=f"w{i}", TETHER_ENDPOINT=f"tcp://127.0.0.1:{free_port()}")
        ws.append(h.spawn(f"w{i}", [binary("tether-train"), *ARGS, "--checkpoint-dir", root],
                          env=env))
    def progressed():
        ms = metrics(caddr)
        return ((value(ms, "tether_job_last_checkpoint_step", job="m") or -1) >= 5 and
                (value(ms, "tether_job_last_step", job="m") or -1) >= 5)
    wait_for(progressed, 60, "steps and a committed checkpoint in the metrics")
    ms = metrics(caddr)
    assert value(ms, "tether_coordinator_up") == 1
    assert value(ms, "tether_coordinator_jobs", state="running") == 1, ms
    assert value(ms, "tether_job_state", job="m", state="running") == 1, ms
    assert value(ms, "tether_job_members", job="m") == 2
    assert value(ms, "tether_job_comm_id_waiting", job="m") == 0  # a ring job: nobody asks
    assert value(ms, "tether_job_generation", job="m") >= 1
    assert value(ms, "tether_job_last_step", job="m") >= 5
    # nothing trained again: the high step is where the generation is
    assert value(ms, "tether_job_reached_step", job="m") == value(ms, "tether_job_last_step",
                                                                   job="m")
    assert value(ms, "tether_job_checkpoints", job="m") >= 1
    assert value(ms, "tether_coordinator_shard_servers", state="alive") == 2
    steps = [value(ms, "tether_worker_last_step", job="m", worker=f"w{i}", rank=str(i))
             for i in range(2)]
    assert all(s is not None and s >= 5 for s in steps), steps
    assert value(ms, "tether_worker_heartbeat_age_seconds", job="m", worker="w0", rank="0") < 2
    chunks = 0
    for s in shards:
        sm = metrics(s.http)
        n = value(sm, "tether_shard_job_chunks", job="m")
        assert n and n >= 1, sm
        assert value(sm, "tether_shard_job_last_round", job="m") >= 4, sm
        assert value(sm, "tether_shard_job_state_bytes", job="m") > 0, sm
        chunks += n
    print(f"  mid-run: last step {value(ms, 'tether_job_last_step', job='m'):.0f}, workers at "
          f"{steps}, checkpoint step "
          f"{value(ms, 'tether_job_last_checkpoint_step', job='m'):.0f}, {chunks:.0f} chunks "
          f"on 2 shards, {len(ms)} coordinator samples")
    for i, w in enumerate(ws):
        assert w.wait(120) == 0, f"w{i} failed"
    ms = metrics(caddr)
    assert value(ms, "tether_job_state", job="m", state="finished") == 1, ms
    assert value(ms, "tether_coordinator_jobs", state="finished") == 1


def test_probes_and_bad_requests(h):
    caddr = f"127.0.0.1:{free_port()}"
    coord = h.coordinator(extra=["--http", caddr])
    assert get(caddr, "/healthz") == (200, "ok\n")
    assert get(caddr, "/readyz") == (200, "ready\n")
    status, body = get(caddr, "/nope")
    assert status == 404 and "/metrics" in body, (status, body)
    head = raw(caddr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith("HTTP/1.1 200 OK") and head.endswith("\r\n\r\n"), head
    assert raw(caddr, b"POST /metrics HTTP/1.1\r\n\r\n").startswith("HTTP/1.1 405"), "POST"
    assert raw(caddr, b"\x16\x03\x01 garbage\r\n\r\n").startswith("HTTP/1.1 400"), "garbage"
    long = b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n"
    assert raw(caddr, long).startswith("HTTP/1.1 4"), "a path too long"
    host, port = caddr.split(":")
    silent = socket.create_connection((host, int(port)), timeout=10)
    t0 = time.monotonic()
    assert get(caddr, "/healthz")[0] == 200  # not held up by the silent client
    assert time.monotonic() - t0 < 2
    silent.settimeout(10)
    assert silent.recv(16) == b"", "the silent connection was not closed at its deadline"
    print(f"  the silent client was cut after {time.monotonic() - t0:.1f} s")
    silent.close()
    assert coord.alive()


def test_bad_http_address_stops_the_daemon(h):
    coord_bin = binary("tether-coordinator")
    r = subprocess.run([coord_bin, "--listen", f"tcp://127.0.0.1:{free_port()}", "--http",
                        "nonsense"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0 and "HTTP address 'nonsense'" in r.stderr, r.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = subprocess.run([binary("tether-shard"), "--listen", "tcp://127.0.0.1:0", "--http",
                            f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=20)
        assert r.returncode != 0 and f"cannot listen for HTTP on 127.0.0.1:{port}" in r.stderr, \
            r.stderr
    print(f"  {r.stderr.strip().splitlines()[-1]}")


if __name__ == "__main__":
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print(f"SKIP: no Fashion-MNIST under {DATA}")
        raise SystemExit(77)
    run_tests([test_metrics_follow_a_job, test_probes_and_bad_requests,
               test_bad_http_address_stops_the_daemon])
