#!/usr/bin/env python3
"""GPU tests of the NCCL rows against real daemons on 127.0.0.1: the
"nccl+ps" row (a regrouped NCCL generation's first steps on the shard
servers while its communicator is built, then NCCL) with a
tether-coordinator and a tether-shard, and nccl_ps_check as the one rank;
and the unique id's relay through a tether-coordinator to a second rank
(nccl_relay_check). The C files say what they check. Exits 77 (skipped)
without a GPU or a CUDA build, and says why."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from tt_harness import BUILD, binary, program_skips, run_tests  # noqa: E402


def test_shards_then_nccl(h):
    coord = h.coordinator()
    h.shard(coord)
    p = h.spawn("check", [binary("nccl_ps_check"), "--coordinator", coord.endpoint])
    rc = p.wait(180)
    for line in p.lines():
        print("  " + line)
    assert rc == 0, f"nccl_ps_check exited {rc}"


def test_two_ranks_one_id(h):
    coord = h.coordinator()
    p = h.spawn("relay", [binary("nccl_relay_check"), "--coordinator", coord.endpoint])
    rc = p.wait(180)
    for line in p.lines():
        print("  " + line)
    assert rc == 0, f"nccl_relay_check exited {rc}"


if __name__ == "__main__":
    why = program_skips(os.path.join(BUILD, "tests", "gpu", "nccl_ps_check"))
    if why is not None:
        print(f"SKIPPED: {why}")
        sys.exit(77)
    run_tests([test_shards_then_nccl, test_two_ranks_one_id])
