"""accumcheck_adapter.ranks' start-up: the port a group forms on, and a group whose rank 0 finds its port taken.
The workers here are small scripts that speak the reply protocol without torch: rank 0 fails its start-up the
first `fail` times (a file counts them) with the message torch's TCPStore raises, and the other ranks then wait,
as a real rank waits for rank 0's store, until they are killed."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

from accumcheck_adapter.ranks import START_ATTEMPTS, WorkerFault, WorkerGroup, port_taken

TCPSTORE_IN_USE = ("RuntimeError: The server socket has failed to listen on any local network address. port: 46007, "
                   "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use")

WORKER = textwrap.dedent("""
    import json, os, sys, time
    rank, port, fail, counter, failure = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    reply = os.fdopen(int(sys.argv[sys.argv.index("--reply-fd") + 1]), "w")
    failed_before = len(open(counter).read()) if os.path.exists(counter) else 0
    if rank == 0 and failed_before < fail:
        open(counter, "a").write("x")
        reply.write(json.dumps({"failed": "the worker did not start: " + failure}) + "\\n")
        reply.flush()
        sys.exit(1)
    if rank > 0:
        time.sleep(0.5)  # rank 0 has answered by now: a failed attempt is counted
        if len(open(counter).read() if os.path.exists(counter) else "") > failed_before:
            time.sleep(600)  # waits for a store that is not there
    reply.write(json.dumps({"ready": True, "port": port}) + "\\n")
    reply.flush()
    sys.stdin.read()
""")


class CountsStops(WorkerGroup):
    """As adapters/deepspeed's group, whose stop() also removes the folder the group keeps: a start again must not
    call it."""

    stops = 0

    def stop(self, kill: bool = False) -> None:
        self.stops += 1
        super().stop(kill)


def group(tmp_path: Path, world_size: int, fail: int, failure: str = TCPSTORE_IN_USE) -> CountsStops:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    counter = tmp_path / "failed"
    return CountsStops(lambda rank, port: [sys.executable, str(script), str(rank), str(port), str(fail),
                                           str(counter), failure],
                       world_size, start_deadline_s=60.0, run_deadline_s=10.0)


def test_a_one_rank_group_leaves_the_port_to_the_kernel(tmp_path: Path) -> None:
    g = group(tmp_path, 1, fail=0)
    try:
        g.wait_ready()
        assert g.ready is not None and g.ready[0]["port"] == 0
    finally:
        g.stop()


def test_several_ranks_form_on_a_free_port(tmp_path: Path) -> None:
    g = group(tmp_path, 2, fail=0)
    try:
        g.wait_ready()
        assert g.ready is not None and [r["port"] for r in g.ready] == [g.port, g.port] and g.port > 0
        assert g.attempts == 1
    finally:
        g.stop()


def test_a_taken_port_starts_the_ranks_again_on_another(tmp_path: Path) -> None:
    g = group(tmp_path, 2, fail=START_ATTEMPTS - 1)
    start = time.monotonic()
    try:
        g.wait_ready()
        assert g.attempts == START_ATTEMPTS and g.stops == 0
        assert g.ready is not None and all(r["port"] == g.port for r in g.ready)
        # the waiting rank of each failed attempt was killed, not waited for
        assert time.monotonic() - start < 30
    finally:
        g.stop()


def test_a_port_taken_at_every_attempt_is_a_fault_naming_it(tmp_path: Path) -> None:
    g = group(tmp_path, 2, fail=START_ATTEMPTS)
    with pytest.raises(WorkerFault, match=f"rank 0 worker did not start .*attempt {START_ATTEMPTS} of "
                                          f"{START_ATTEMPTS}.*EADDRINUSE"):
        g.wait_ready()
    assert all(w.process.poll() is not None for w in g.workers)


def test_any_other_start_up_failure_is_a_fault_at_once(tmp_path: Path) -> None:
    g = group(tmp_path, 2, fail=1, failure="ImportError: no module named deepspeed")
    start = time.monotonic()
    with pytest.raises(WorkerFault, match="attempt 1 of .*ImportError"):
        g.wait_ready()
    assert g.attempts == 1 and time.monotonic() - start < 30
    assert all(w.process.poll() is not None for w in g.workers)


def test_port_taken_reads_torch_with_and_without_libuv() -> None:
    assert port_taken(TCPSTORE_IN_USE)
    assert port_taken("RuntimeError: Address already in use")
    assert not port_taken("RuntimeError: Connection refused")
