"""deepspeed: accumcheck drives a REAL DeepSpeed release (docs/deepspeed-adapter.md, docs/adapter-protocol.md).

    adapter.py --version 0.16.4        (adapters/deepspeed-0.16.4/adapter.json runs this)

Upstream code that runs: DeepSpeed X.Y.Z as released on PyPI, installed unmodified by scripts/deepspeed-env.sh into
.venv/deepspeed/X.Y.Z, on torch 2.6.0 with DeepSpeed's CPU accelerator and gloo: deepspeed.initialize,
engine.forward / backward / step / set_gradient_accumulation_boundary / get_global_grad_norm /
save_checkpoint / load_checkpoint, ZeRO stages 0-3 with and without CPU offload of the optimizer, and the
torch.optim optimizer DeepSpeed steps. worker.py says exactly what is read and how.
Ours: this process (the protocol, no torch in it, so the handshake is instant), which hands each run request to
long-lived worker processes (worker.py), one per rank: one worker for one-rank scenarios, a pair joined by a gloo
process group on 127.0.0.1 for two ranks. Three settings around the import (release.py) and the pinned config
(ds_config.py).

Deadlines. Every reply a worker owes (start-up, each run) has a deadline below accumcheck's own run deadline; a
worker that misses it, exits or garbles a line is killed with its partners (a rank left alone would wait in a
collective), the run is answered "failed", and the next run starts a fresh group on a fresh port. A one-rank worker
survives a failed trial (each trial builds its own engine). On two ranks the group survives only when every rank
raised the same exception within FAILED_PEER_GRACE_S of the first and then passes a check of the process group
(WorkerGroup.healthy: one all_reduce of known values, with a deadline): DeepSpeed's own argument checks raise on
every rank at the same point (0.17.6's TypeError on a second boundary backward before step(), for one). Any
other failure on two ranks restarts the pair: a rank may have been left in a collective.

Declared: ZeRO 0, 1, 2, 3 (ZeRO-3 measured on every pinned release); offload off and on (ZeRO-1/2/3); world sizes 1
and 2; fp32, precision "full"; every model, aggregation and optimizer, momentum, weight decay, clipping; automatic
and manual boundaries, step() after every backward or once per window, uneven windows; checkpoints; routed experts
and frozen parameters. Refused per run, with the reason (worker.Trial.check_supported): offload or experts with
ZeRO-0 (its torch.optim skips a parameter without gradient), a micro-batch reaching no trainable parameter, ranks
reaching different experts in one backward under ZeRO-1/2/3 (a hang in DeepSpeed), ZeRO-1/2 on two ranks with
0.18.9 (release.TWO_RANK_ZERO_FAILS). missing_gradient_is_zero: true (ZeRO's flat partitions step every trainable
parameter). Reports: applied gradient, grad norm and clip coefficient (null for ZeRO-0: DeepSpeed keeps no norm
there; the coefficient is DeepSpeed's rule applied to its norm, see worker.py), optimizer state.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import release  # noqa: E402
from accumcheck_adapter import (  # noqa: E402
    Adapter,
    Capabilities,
    Limits,
    Reports,
    Result,
    RunRequest,
    Unsupported,
    serve,
)
from accumcheck_adapter.scenario import AGGREGATIONS, MODEL_KINDS, OPTIMIZERS  # noqa: E402

# Below accumcheck's --adapter-start-timeout (120 s) and --adapter-timeout (60 s): a worker start imports
# DeepSpeed (about 5-10 s on two busy cores) and warms up; a trial takes tens of milliseconds.
START_DEADLINE_S = 100.0
RUN_DEADLINE_S = 45.0
# How long the other ranks get to report a failure too, once one rank failed; and the group check's deadline.
FAILED_PEER_GRACE_S = 5.0
SYNC_DEADLINE_S = 10.0

class DeepSpeedCapabilities(Capabilities):
    """The kit's capability check, except for optimizer.missing_gradient_is_zero. The flag in a scenario says which
    semantics its oracle follows; accumcheck takes that from the handshake (the oracle of an adapter target steps
    missing gradients as zeros when the capability says so) but sends the scenario as generated, with the flag
    false, and the kit's check would refuse every such request from an adapter that declares true. DeepSpeed's
    semantics are DeepSpeed's whatever the flag says, so the adapter runs the request as if it said true."""

    def check(self, request: RunRequest) -> None:
        o = request.scenario.optimizer
        if o.missing_gradient_is_zero != self.missing_gradient_is_zero:
            o = dataclasses.replace(o, missing_gradient_is_zero=self.missing_gradient_is_zero)
            request = dataclasses.replace(request, scenario=dataclasses.replace(request.scenario, optimizer=o))
        super().check(request)


CAPABILITIES = DeepSpeedCapabilities(
    models=MODEL_KINDS, experts=True, frozen_parameters=True, aggregations=AGGREGATIONS, optimizers=OPTIMIZERS,
    momentum=True, weight_decay=True, clipping=True, world_sizes=(1, 2), zero_stages=(0, 1, 2, 3),
    offload=(False, True), dtypes=("fp32",), precisions=("full", "bf16"), loss_scaling=False,
    boundary=("automatic", "manual"), step_after_every_backward=(True, False), uneven_windows=True,
    checkpoint=True,
    reports=Reports(applied_gradient=True, grad_norm=True, clip_coefficient=True, optimizer_state=True),
    missing_gradient_is_zero=True,
    limits=Limits(rank_count_max=2, step_count_max=16, micro_batch_count_max=16, token_count_max=1024))


class WorkerFault(RuntimeError):
    """A worker missed a deadline, exited, or wrote something that is not a reply."""


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker:
    """One rank: a worker.py process, its request pipe (stdin) and its reply pipe (read by a thread)."""

    def __init__(self, version: str, rank: int, world_size: int, port: int, checkpoint_dir: Path) -> None:
        read_fd, write_fd = os.pipe()
        self.rank = rank
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "worker.py"), "--version", version, "--rank", str(rank),
             "--world-size", str(world_size), "--port", str(port), "--reply-fd", str(write_fd),
             "--checkpoint-dir", str(checkpoint_dir)],
            stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), pass_fds=(write_fd,), text=True, cwd=HERE)
        os.close(write_fd)
        self.replies: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self.reader.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8") as stream:
            for line in stream:
                self.replies.put(line)
        self.replies.put(None)  # end of file: the worker exited

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerFault(f"rank {self.rank} worker is gone ({e})") from None

    def receive(self, deadline: float, what: str) -> dict[str, Any]:
        reply = self.poll(deadline - time.monotonic(), what)
        if reply is None:
            raise WorkerFault(f"rank {self.rank} worker missed the deadline for {what}")
        return reply

    def poll(self, timeout: float, what: str) -> dict[str, Any] | None:
        """The next reply, or None if none came within `timeout` seconds."""
        try:
            line = self.replies.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if line is None:
            code = self.process.poll()
            raise WorkerFault(f"rank {self.rank} worker exited (status {code}) during {what}")
        try:
            reply = json.loads(line)
        except ValueError:
            raise WorkerFault(f"rank {self.rank} worker wrote a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise WorkerFault(f"rank {self.rank} worker wrote {line[:200]!r}")
        return reply

    def stop(self, kill: bool) -> None:
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                with contextlib.suppress(OSError):
                    assert self.process.stdin is not None
                    self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class WorkerGroup:
    """The workers of one world size, started together on one free port, ready after their warm-up."""

    def __init__(self, version: str, world_size: int) -> None:
        self.world_size = world_size
        self.checkpoint_dir = Path(tempfile.mkdtemp(prefix=f"accumcheck-deepspeed-{version}-w{world_size}-"))
        port = free_port()
        self.workers = [Worker(version, r, world_size, port, self.checkpoint_dir) for r in range(world_size)]
        self.ready: list[dict[str, Any]] | None = None
        self.started = time.monotonic()

    def wait_ready(self) -> None:
        if self.ready is not None:
            return
        deadline = self.started + START_DEADLINE_S
        replies = [w.receive(deadline, "start-up") for w in self.workers]
        for w, r in zip(self.workers, replies, strict=True):
            if not r.get("ready"):
                raise WorkerFault(f"rank {w.rank} worker did not start: {r.get('failed')}\n{r.get('traceback', '')}")
        self.ready = replies

    def run(self, request: RunRequest) -> dict[str, Any]:
        self.wait_ready()
        line = json.dumps(request.to_json(), separators=(",", ":"))
        for w in self.workers:
            w.send(line)
        replies = self.collect(time.monotonic() + RUN_DEADLINE_S, f"run {request.id}")
        shutil.rmtree(self.checkpoint_dir / str(request.id), ignore_errors=True)
        failed = [(w, r) for w, r in zip(self.workers, replies, strict=True) if "failed" in r]
        if failed:
            w, r = failed[0]
            message = f"rank {w.rank}: {r['failed']}\n{r.get('traceback', '')}"
            if self.world_size > 1 and not (len(failed) == len(replies) and same_exception(replies)
                                            and self.healthy(request.id)):
                raise WorkerFault(message)
            raise RuntimeError(message)
        unsupported = [r["unsupported"] for r in replies if "unsupported" in r]
        if unsupported:
            if len(unsupported) != len(replies):
                raise WorkerFault(f"the ranks disagree whether the scenario runs: {unsupported[0]}")
            raise Unsupported(unsupported[0])
        if any("result" not in r for r in replies):
            raise WorkerFault(f"a worker reply without a result: {str(replies)[:300]}")
        return replies[0]["result"]

    def collect(self, deadline: float, what: str) -> list[dict[str, Any]]:
        """One reply from every rank. Once a rank has failed, the others get FAILED_PEER_GRACE_S to reply too; a
        rank still silent then is reported without waiting longer: it may be waiting for the failed one in a
        collective."""
        replies: list[dict[str, Any] | None] = [None] * len(self.workers)
        first_failure: tuple[int, dict[str, Any]] | None = None  # (rank, reply)
        grace_end = deadline  # once a rank has failed: when the others' grace ends
        while any(r is None for r in replies):
            now = time.monotonic()
            if first_failure is not None and now >= grace_end:
                rank, reply = first_failure
                raise WorkerFault(f"rank {rank}: {reply['failed']}\n{reply.get('traceback', '')}")
            if now >= deadline:
                late = next(w for w, r in zip(self.workers, replies, strict=True) if r is None)
                raise WorkerFault(f"rank {late.rank} worker missed the deadline for {what}")
            for i, w in enumerate(self.workers):
                if replies[i] is not None:
                    continue
                reply = w.poll(0.02 if len(self.workers) > 1 else deadline - time.monotonic(), what)
                if reply is not None and "failed" in reply and first_failure is None:
                    first_failure = (w.rank, reply)
                    grace_end = min(deadline, time.monotonic() + FAILED_PEER_GRACE_S)
                replies[i] = reply
        return [r for r in replies if r is not None]

    def healthy(self, request_id: int) -> bool:
        """Whether the process group still pairs its collectives after a failure on every rank: each worker
        all_reduces (request id, rank + 1) and checks the sums; a rank left behind in a collective of the failed
        trial makes it time out or mismatch."""
        line = json.dumps({"sync": request_id})
        for w in self.workers:
            w.send(line)
        try:
            replies = self.collect(time.monotonic() + SYNC_DEADLINE_S, f"the group check after run {request_id}")
        except WorkerFault:
            return False
        return all(r.get("synced") is True for r in replies)

    def stop(self, kill: bool = False) -> None:
        for w in self.workers:
            w.stop(kill)
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)


def same_exception(replies: list[dict[str, Any]]) -> bool:
    """Whether every rank raised the same exception type at the same line of code (the traceback's last frame)."""
    def where(r: dict[str, Any]) -> tuple[str, str]:
        frames = [x for x in r.get("traceback", "").splitlines() if x.lstrip().startswith('File "')]
        return r["failed"].split(":", 1)[0], frames[-1].strip() if frames else ""
    return len({where(r) for r in replies}) == 1


class DeepSpeedAdapter(Adapter):
    def __init__(self, version: str) -> None:
        self.release = version
        self.name = f"deepspeed-{version}"
        self.version = version
        self.description = (f"the REAL DeepSpeed {version} (PyPI release, CPU accelerator, gloo): ZeRO-0/1/2/3, "
                            "CPU offload, world size 1-2")
        self.groups: dict[int, WorkerGroup] = {}
        # The one-rank group starts now, behind the handshake: its import is most of a first run's time.
        self.group(1)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def group(self, world_size: int) -> WorkerGroup:
        if world_size not in self.groups:
            self.groups[world_size] = WorkerGroup(self.release, world_size)
        return self.groups[world_size]

    def run(self, request: RunRequest) -> Result:
        world_size = request.scenario.engine.rank_count
        stage = request.scenario.engine.zero_stage
        if world_size > 1 and stage in (1, 2) and self.release in release.TWO_RANK_ZERO_FAILS:
            raise Unsupported(release.TWO_RANK_ZERO_FAILS[self.release])
        group = self.group(world_size)
        start = time.monotonic()
        outcome, detail = "result", ""
        try:
            reply = group.run(request)
        except WorkerFault as e:
            outcome, detail = "fault", str(e)[:300]
            group.stop(kill=True)
            del self.groups[world_size]
            raise
        except Exception as e:
            outcome, detail = type(e).__name__, str(e)[:300]
            raise
        finally:
            self.trace(request, outcome, detail, time.monotonic() - start)
        return Result.from_json(reply)

    def trace(self, request: RunRequest, outcome: str, detail: str, seconds: float) -> None:
        """ACCUMCHECK_DEEPSPEED_TRACE=FILE appends one line per run: how long it took and what it was (with the
        whole request when it failed)."""
        path = os.environ.get("ACCUMCHECK_DEEPSPEED_TRACE")
        if not path:
            return
        e = request.scenario.engine
        record = {"release": self.release, "id": request.id, "outcome": outcome, "detail": detail,
                  "seconds": round(seconds, 4),
                  "ranks": e.rank_count, "zero_stage": e.zero_stage, "offload": e.offload,
                  "steps": len(request.scenario.steps), "calls": len(request.calls)}
        if outcome not in ("result", "Unsupported"):
            record["request"] = request.to_json()  # to rerun it by hand
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        for g in self.groups.values():
            g.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="accumcheck adapter for a real DeepSpeed release")
    parser.add_argument("--version", required=True, help="the DeepSpeed release, X.Y.Z (scripts/deepspeed-env.sh)")
    args = parser.parse_args()
    if not release.installed(args.version):
        print(f"deepspeed adapter: DeepSpeed {args.version} is not installed in {release.release_dir(args.version)}"
              f": run ACCUMCHECK_DEEPSPEED_RELEASES={args.version} scripts/deepspeed-env.sh", file=sys.stderr)
        return 1
    adapter = DeepSpeedAdapter(args.version)
    try:
        return serve(adapter)
    finally:
        adapter.close()


if __name__ == "__main__":
    raise SystemExit(main())
