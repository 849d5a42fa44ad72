"""The ranks of the torch-ddp adapter as processes: rank 0 is the adapter, rank 1 a worker it starts once.

Start-up (once per adapter process):
    rank 0 starts rank 1 (this same script, with --rank-1-worker) and waits for its "ready" (torch imported),
    hosts a TCPStore on 127.0.0.1 at a port the kernel picks, sends the port down rank 1's stdin; both
    init_process_group("gloo", timeout=30 s) and make the one-rank group {0} (for one-rank scenarios); then
    rank 0 answers the handshake and serves.
Each run request (rank 0):
    check it; if it has two ranks, send it to rank 1 as one JSON line on its stdin; run rank 0's part
    (DdpLoop); read rank 1's result line from its stdout (deadline: the process-group timeout); check that
    both ranks applied the same gradients and ended with the same parameters, bit for bit; reply.
Rank 1 reads one request per line between runs (no collective while idle, so no timeout runs while it
waits), runs its part, writes its result, and dies with rank 0: PR_SET_PDEATHSIG, and end of file on stdin.

Failure: a collective that fails or times out can leave the other rank inside it, and gloo groups cannot be
mended, so rank 0 then writes a "failed" error reply itself and exits with status 3; accumcheck restarts the
adapter (and would kill its process group anyway). Rank 1 exits after any error too. Scenarios outside the
capabilities are refused (error "unsupported") before rank 1 sees them.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from accumcheck_adapter import Adapter, Capabilities, Result, RunRequest, serve

if TYPE_CHECKING:  # both import torch; main imports them once rank 1 is on its way (see main)
    from ddp_group import Ranks
    from ddp_loop import DdpLoop

PROCESS_GROUP_TIMEOUT_S = 30.0  # every collective's deadline (ddp_group.py); below accumcheck's 60 s per run
RANK_1_START_TIMEOUT_S = 90.0  # rank 1 importing torch, within accumcheck's 120 s for the handshake
WORKER_FLAG = "--rank-1-worker"
FATAL_EXIT_STATUS = 3
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


# ------------------------------------------------------------------------------------- line channels


def encode(message: dict[str, Any]) -> str:
    return json.dumps(message, allow_nan=False, separators=(",", ":"))


class LineReader:
    """Lines from a pipe with a deadline (select on the raw descriptor, so no buffered data hides)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def read_line(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while (end := self.buffer.find(b"\n")) < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no line within {timeout_s} s")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    raise EOFError("end of file")
                self.buffer += chunk
        line = bytes(self.buffer[:end]).decode("utf-8")
        del self.buffer[:end + 1]
        return line


class Rank1Process:
    """Rank 1 as seen from rank 0: a child process with a request pipe (its stdin) and a reply pipe (its
    stdout); its stderr is ours."""

    def __init__(self, script: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, script, WORKER_FLAG, str(os.getpid())], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None, text=False, bufsize=0)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.reader = LineReader(self.process.stdout.fileno())

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((encode(message) + "\n").encode("utf-8"))

    def receive(self, timeout_s: float) -> dict[str, Any]:
        try:
            return json.loads(self.reader.read_line(timeout_s))
        except (TimeoutError, EOFError) as e:
            raise RuntimeError(f"rank 1 (pid {self.pid}) did not answer: {e}; it {self.describe()}") from e

    def wait_ready(self) -> None:
        reply = self.receive(RANK_1_START_TIMEOUT_S)
        if reply.get("type") != "ready":
            raise RuntimeError(f"rank 1 (pid {self.pid}) sent {reply!r} instead of ready")

    def describe(self) -> str:
        code = self.process.poll()
        return "is still running" if code is None else f"exited with status {code}"

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)

    def shutdown(self) -> None:
        """Asks rank 1 to leave, closes its stdin, and kills it if it is still there 2 s later (accumcheck
        allows the adapter 5 s to exit)."""
        with contextlib.suppress(OSError):
            self.send({"type": "shutdown"})
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()


# ---------------------------------------------------------------------------------------------- rank 0


class RankFailure(Exception):
    """The group cannot be trusted any more (a rank died, a collective failed or timed out)."""


class DdpAdapter(Adapter):
    """Rank 0: answers each run request with both ranks' work; see the module docstring."""

    def __init__(self, loop: type[DdpLoop], ranks: Ranks, rank1: Rank1Process, protocol_out: TextIO, *,
                 name: str, version: str, description: str) -> None:
        self.loop = loop
        self.ranks = ranks
        self.rank1 = rank1
        self.protocol_out = protocol_out
        self.name = name
        self.version = version
        self.description = description

    def capabilities(self) -> Capabilities:
        return self.loop.CAPABILITIES

    def run(self, request: RunRequest) -> Result:
        self.loop.check_runnable(request)  # Unsupported: an ordinary reply, rank 1 has not seen the request
        if request.scenario.engine.rank_count == 1:
            # The group {0} has no peer to leave inside a collective: an exception is an ordinary "failed".
            return self.ranks.run(self.loop, request)
        try:
            self.rank1.send({"type": "run", "request": request.to_json()})
            result = self.ranks.run(self.loop, request)
            self.compare(result, self.rank1.receive(PROCESS_GROUP_TIMEOUT_S), request)
            return result
        except RanksDisagree:
            raise  # both ranks finished: the group is sound, the reply is an ordinary "failed"
        except Exception as e:
            self.die(request.id, e)

    @staticmethod
    def compare(mine: Result, reply: dict[str, Any], request: RunRequest) -> None:
        """Rank 1's gradients, norms and parameters (and optimizer state without ZeRO) must equal rank 0's,
        bit for bit (the JSON of a float is its exact value, -0.0 included)."""
        if reply.get("type") != "result":
            raise RankFailure(f"rank 1 failed: {reply.get('message')}\n{reply.get('traceback', '')}")
        ours = mine.to_json(request.id)
        keys = ["steps", "parameters"] + (["optimizer_state"] if request.scenario.engine.zero_stage == 0 else [])
        for key in keys:
            if encode(ours[key]) != encode(reply[key]):
                raise RanksDisagree(key, ours[key], reply[key])

    def die(self, request_id: int, error: Exception) -> NoReturn:
        """Replies "failed" and exits: after a failed collective neither rank can rejoin the group."""
        reply = {"type": "error", "id": request_id, "kind": "failed",
                 "message": f"rank 0: {type(error).__name__}: {error} (rank 1 {self.rank1.describe()}); the "
                            f"process group cannot be recovered, the adapter exits with status "
                            f"{FATAL_EXIT_STATUS} and is restarted",
                 "traceback": traceback.format_exc()}
        with contextlib.suppress(Exception):
            self.protocol_out.write(encode(reply) + "\n")
            self.protocol_out.flush()
        self.rank1.kill()
        sys.stderr.flush()
        os._exit(FATAL_EXIT_STATUS)


class RanksDisagree(Exception):
    def __init__(self, key: str, rank0: Any, rank1: Any) -> None:
        super().__init__(f"the ranks disagree on {key}: the gradient DDP applied should be identical on every "
                         f"rank; rank 0 {encode(rank0)[:300]}, rank 1 {encode(rank1)[:300]}")


# ---------------------------------------------------------------------------------------------- rank 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL when rank 0 goes (Linux prctl); if rank 0 went before that took effect, exit now."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(FATAL_EXIT_STATUS)


def worker(loop: type[DdpLoop], parent_pid: int) -> int:
    """Rank 1's life: ready, the port, the group, then one request per stdin line until shutdown or end of
    file."""
    from ddp_group import Ranks

    out = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)  # anything printed goes to stderr, only result lines reach rank 0
    out.write(encode({"type": "ready"}) + "\n")
    out.flush()
    first = sys.stdin.readline()
    if not first:
        return 0
    ranks = Ranks(1, json.loads(first)["port"])
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("type") == "shutdown":
            break
        request_id = msg["request"].get("id")
        try:
            request = RunRequest.from_json(msg["request"])
            result = ranks.run(loop, request).to_json(request.id)
        except Exception as e:
            out.write(encode({"type": "error", "id": request_id, "kind": "failed",
                              "message": f"rank 1: {type(e).__name__}: {e}", "traceback": traceback.format_exc()})
                      + "\n")
            out.flush()
            return FATAL_EXIT_STATUS  # the group may be inside a collective: never reuse it
        out.write(encode(result) + "\n")
        out.flush()
    ranks.close()
    return 0


# ------------------------------------------------------------------------------------------ entry point


LoopClass = Callable[[], "type[DdpLoop]"]


def main(loop: type[DdpLoop] | LoopClass, *, name: str, version: str = "1.0", description: str = "") -> NoReturn:
    """The adapter (rank 0), or with --rank-1-worker PID its rank 1. The script that calls main is started
    again as rank 1, so a DdpLoop subclass runs on both ranks. `loop` is the DdpLoop (sub)class, or a function
    returning it: then rank 0 starts rank 1 before it imports torch, and the two imports (most of the start-up)
    run at once."""
    worker_pid = int(sys.argv[2]) if len(sys.argv) == 3 and sys.argv[1] == WORKER_FLAG else None
    if worker_pid is not None:
        die_with_parent(worker_pid)
        quick_exit(worker(loop_class(loop), worker_pid))
    rank1 = Rank1Process(os.path.abspath(sys.argv[0]))
    try:
        loop_type = loop_class(loop)
        from ddp_group import Ranks, master_store

        rank1.wait_ready()
        store = master_store()
        rank1.send({"port": store.port})
        ranks = Ranks(0, store.port, store=store)
    except Exception:
        traceback.print_exc()
        rank1.kill()
        quick_exit(FATAL_EXIT_STATUS)
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    adapter = DdpAdapter(loop_type, ranks, rank1, protocol, name=name, version=version, description=description)
    status = serve(adapter, stdout=protocol)
    rank1.shutdown()
    ranks.close()
    protocol.flush()
    quick_exit(status)


def quick_exit(status: int) -> NoReturn:
    """Exits without the interpreter's teardown of torch (seconds on a loaded machine); the streams are
    flushed first, and nothing else is left to save."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def loop_class(loop: type[DdpLoop] | LoopClass) -> type[DdpLoop]:
    """The loop class, imported now if `loop` is a function; with torch in deterministic mode and gloo pinned
    to loopback (ddp_group.py)."""
    from ddp_group import deterministic_distributed

    deterministic_distributed()
    return loop if isinstance(loop, type) else loop()
