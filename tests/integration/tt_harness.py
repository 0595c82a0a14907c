"""Integration-test harness: starts real tether daemons and clients on
127.0.0.1 with free ports, each test in its own temp dir, and kills them for
real. Logs are kept (and their tails printed) when a test fails; every
process a test started is killed when the test ends, whatever happens.

Binaries come from the build tree given by TETHER_BUILD_DIR (ctest sets it).
"""
import array
import atexit
import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

BUILD = os.environ.get("TETHER_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))


def _pin_blas_kernel():
    """Pins OpenBLAS's Haswell kernel for every process the tests start.
    The tests compare runs on different world sizes within 1e-5, and
    training amplifies the float32 rounding between one 256-row product and
    two 128-row ones: with OpenBLAS 0.3.21's Cooperlake kernel, one rank and
    two ranks end 1.6e-4 apart after 50 steps; with the Haswell kernel,
    3e-8 (docs/testing.md). The product keeps the kernel OpenBLAS picks.
    A CPU without AVX2 and FMA cannot run that kernel and is left alone, as
    is an OPENBLAS_CORETYPE set by the caller."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "").split()
    except OSError:
        return
    if "avx2" in flags and "fma" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


_pin_blas_kernel()


def _on_sigterm(signum, frame):
    """A test killed by its time limit (ctest's, or timeout(1) in the
    device check) still kills what it started: the daemons run in sessions
    of their own, which no signal to this process reaches. The exception
    unwinds through run_tests' finally, which does that."""
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _on_sigterm)


def binary(name):
    for sub in ("server/coordinator", "server/shard", "tools", "tests/integration",
                "tests/gpu", "worker/train", "bench", ""):
        p = os.path.join(BUILD, sub, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise FileNotFoundError(f"{name} not found under {BUILD}")


# Ports this test process claimed (see free_port): (path, fd), held until
# it exits, when _release_claims removes their files.
_CLAIMS = []


def _release_claims():
    for path, fd in _CLAIMS:
        try:
            os.unlink(path)  # before the unlock, as tt_launch_release_port
        except OSError:
            pass
        os.close(fd)
    _CLAIMS.clear()


atexit.register(_release_claims)


def _claim(port):
    """Claims `port` among tether-launch processes and test harnesses of this
    host the way tether-launch does (tools/launch/launch_env.c): an flock on
    <TMPDIR or /tmp>/tether-ports/<port> that counts only if the name still
    leads to the locked file (its holder removes it when done). False when
    another one holds it; True when claimed, or when no claim can be made
    here."""
    tmp = os.environ.get("TMPDIR", "")
    d = os.path.join(tmp if tmp.startswith("/") else "/tmp", "tether-ports")
    try:
        os.mkdir(d, 0o777)
        os.chmod(d, 0o1777)
    except OSError:
        pass
    path = os.path.join(d, str(port))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        mine, named = os.fstat(fd), os.stat(path)
        if (mine.st_ino, mine.st_dev) != (named.st_ino, named.st_dev):
            raise OSError("the claim file was removed meanwhile")
    except OSError:
        os.close(fd)
        return False
    _CLAIMS.append((path, fd))
    return True


def free_port():
    """A port that binds now, below the kernel's ephemeral range (as
    tether-launch picks them): a worker binds its ring port again at every
    generation, and a port of that range may meanwhile become the source
    port of any outgoing connection. Claimed like tether-launch's, so tests
    running in parallel (and their launchers) never pick the same one."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    hi, lo = low - 1, max(10000, low - 8192)
    for _ in range(64 if hi > lo else 0):
        port = random.randint(lo, hi)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _claim(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process whose stdout+stderr go to a log file; lines printed
    on stdout can be awaited."""

    def __init__(self, h, name, argv, env=None):
        self.name = name
        self.log_path = os.path.join(h.dir, name + ".log")
        self.out_path = os.path.join(h.dir, name + ".out")
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env = {k: v for k, v in full_env.items() if v is not None}  # None: unset
        self.log = open(self.log_path, "ab")
        self.out = open(self.out_path, "ab")
        self.p = subprocess.Popen(argv, stdout=self.out, stderr=self.log, env=full_env,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.p.pid

    def lines(self, stream="out", complete=False):
        """The lines written so far to stdout ("out") or stderr ("log");
        with complete=True, without a last line still being written (a
        line read half-way must be looked at again once it is whole)."""
        path = self.out_path if stream == "out" else self.log_path
        with open(path, "r", errors="replace") as f:
            text = f.read()
        return (text[:text.rfind("\n") + 1] if complete else text).splitlines()

    def wait_line(self, pred, timeout, what="", stream="out"):
        """Waits for a line (stdout, or stderr with stream="log") for which
        pred(line) is true; returns it."""
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            ls = self.lines(stream, complete=True)
            for line in ls[seen:]:
                if pred(line):
                    return line
            seen = len(ls)
            if self.p.poll() is not None:
                ls = self.lines(stream)  # exited: a last line without newline is whole
                for line in ls[seen:]:
                    if pred(line):
                        return line
                raise AssertionError(f"{self.name} exited ({self.p.returncode}) before {what}")
            time.sleep(0.02)
        raise AssertionError(f"{self.name}: no line {what} within {timeout} s")

    def signal(self, sig):
        if self.p.poll() is None:
            os.kill(self.pid, sig)

    def kill9(self):
        self.signal(signal.SIGKILL)
        self.p.wait(timeout=10)

    def alive(self):
        return self.p.poll() is None

    def wait(self, timeout):
        return self.p.wait(timeout=timeout)


class Harness:
    def __init__(self, name):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=f"tether-{name}-")
        self.procs = []

    def spawn(self, name, argv, env=None):
        p = Proc(self, name, argv, env)
        self.procs.append(p)
        return p

    def coordinator(self, port=None, name="coord", extra=()):
        port = port or free_port()
        state = os.path.join(self.dir, "coord-state")
        argv = [binary("tether-coordinator"), "--listen", f"tcp://127.0.0.1:{port}",
                "--state-dir", state, "--log-level", "info", *extra]
        p = self.spawn(name, argv)
        p.endpoint = f"tcp://127.0.0.1:{port}"
        p.port = port
        wait_for(lambda: self.ctl(p.endpoint, "status", check=False)[0] == 0, 10,
                 "coordinator answers status")
        return p

    def shard(self, coord, sid="s0", extra=(), env=None):
        """A tether-shard daemon registered with `coord` on a free port;
        .endpoint once it listens."""
        argv = [binary("tether-shard"), "--listen", "tcp://127.0.0.1:0", "--coordinator",
                coord.endpoint, "--id", sid, "--heartbeat-ms", "200", "--log-level", "info",
                *extra]
        p = self.spawn(sid, argv, env=env)
        p.endpoint = p.wait_line(lambda l: l.startswith("LISTENING"), 10,
                                 "LISTENING").split()[1]
        return p

    def ctl(self, endpoint, *args, check=True, timeout_ms=3000):
        argv = [binary("tetherctl"), "--coordinator", endpoint, "--timeout-ms",
                str(timeout_ms), *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_ms / 1000 + 10)
        if check and r.returncode != 0:
            raise AssertionError(f"tetherctl {' '.join(args)} failed ({r.returncode}): "
                                 f"{r.stderr.strip()}")
        return r.returncode, r.stdout, r.stderr

    def ctl_json(self, endpoint, *args):
        return json.loads(self.ctl(endpoint, *args, "--json")[1])

    def close(self, failed):
        for p in self.procs:
            if p.alive():
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            p.log.close()
            p.out.close()
        if failed:
            print(f"--- logs kept in {self.dir}")
            for p in self.procs:
                for path in (p.log_path, p.out_path):
                    with open(path, "r", errors="replace") as f:
                        tail = f.read().splitlines()[-25:]
                    print(f"--- tail of {os.path.basename(path)} (pid {p.pid}):")
                    print("\n".join(tail))
        elif os.environ.get("TETHER_KEEP_LOGS"):
            print(f"--- logs kept in {self.dir} (TETHER_KEEP_LOGS)")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def read_params(path):
    """A raw float32 parameter dump (tether-train --dump-params)."""
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def rel_diff(a, b):
    """Relative L2 distance |a - b| / |b| of two parameter vectors."""
    assert len(a) == len(b), (len(a), len(b))
    num = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
    den = sum(y * y for y in b) ** 0.5
    return num / den


def committed(root):
    """Checkpoint ids under `root` that have a MANIFEST (committed)."""
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root)
                  if os.path.isfile(os.path.join(root, d, "MANIFEST")))


def verify_checkpoint(path):
    """`tetherctl checkpoint verify PATH`: (exit code, its output)."""
    r = subprocess.run([binary("tetherctl"), "checkpoint", "verify", path], capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def program_skips(path):
    """Why the GPU test program `path` skips here: its SKIPPED line when it
    exits 77, "... is not built" when it is missing; None when it runs."""
    if not os.path.exists(path):
        return f"{os.path.basename(path)} is not built"
    r = subprocess.run([path], capture_output=True, text=True)
    return r.stdout.strip().replace("SKIPPED: ", "") if r.returncode == 77 else None


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for: {what}")


def launched_pid(p, label):
    """The pid tether-launch (process `p`) reported for `label`, such as
    "worker 1" or "shard 0": the first one started."""
    for line in p.lines() + p.lines("log"):
        m = re.search(rf"started {label}: pid (\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError(f"no pid for {label}")


def parse_kv(line):
    """'GENERATION gen=3 rank=1 world=7' -> {'gen': 3, 'rank': 1, 'world': 7}"""
    out = {}
    for tok in line.split()[1:]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


def run_tests(tests):
    """Runs each test(h) with a fresh harness; prints a summary line that
    ctest's log shows; exit status 1 when any failed."""
    passed = failed = 0
    only = [n for n in os.environ.get("TETHER_TESTS", "").split(",") if n]
    for t in tests:
        if only and t.__name__ not in only:
            continue  # TETHER_TESTS=name,...: run just those
        h = Harness(t.__name__)
        start = time.monotonic()
        ok = False
        try:
            t(h)
            ok = True
        except Exception:
            traceback.print_exc()
        except SystemExit:
            print(f"FAIL {t.__name__}: terminated after {time.monotonic() - start:.1f} s",
                  flush=True)
            raise
        finally:
            h.close(failed=not ok)
        took = time.monotonic() - start
        print(f"{'PASS' if ok else 'FAIL'} {t.__name__} ({took:.1f} s)", flush=True)
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
