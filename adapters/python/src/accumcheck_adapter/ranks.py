"""Ranks as processes: an adapter whose training code runs on several ranks starts one long-lived worker process
per rank, joined by a gloo process group, and hands each run request to all of them (adapters/deepspeed and
adapters/transformers use this; docs/adapter-protocol.md is the protocol accumcheck speaks with the adapter).

Adapter side (no torch needed): `WorkerGroup(command, world_size)` starts `command(rank, port)` for each rank on
one local port (`group_port`); every worker writes its replies, one JSON object per line, to the file descriptor
the group appends as `--reply-fd N` (its stdout goes to the adapter's stderr: training code prints).
`run(request)` returns every rank's result, in rank order.

Worker side: `serve_rank(run, rank, world_size, reply, ready)` answers the request lines on stdin, after one
{"ready": true, ...} line: {"result": ...} | {"unsupported": msg} | {"failed": msg, "traceback": ...}, and
{"synced": bool} to the group check {"sync": id}.

Deadlines. Every reply a worker owes (start-up, each run) has a deadline below accumcheck's own; a worker that
misses it, exits or garbles a line is a WorkerFault: the caller kills the group (a rank left alone would wait in a
collective), answers the run "failed", and starts a fresh group on a fresh port for the next run. A one-rank group
survives a failed run. On several ranks the group survives only when every rank raised the same exception within
FAILED_PEER_GRACE_S of the first and then passes a check of the process group (`healthy`: one all_reduce of known
values, with a deadline): training code's own argument checks raise on every rank at the same point. Any other
failure on several ranks is a WorkerFault: a rank may have been left in a collective.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from accumcheck_adapter.errors import ProtocolError, Unsupported
from accumcheck_adapter.result import Result
from accumcheck_adapter.scenario import RunRequest

# How long the other ranks get to report a failure too, once one rank failed; and the group check's deadline.
FAILED_PEER_GRACE_S = 5.0
SYNC_DEADLINE_S = 10.0
# How many times a group of several ranks is started, each on a fresh port, while rank 0 finds its port taken.
START_ATTEMPTS = 3


class WorkerFault(RuntimeError):
    """A worker missed a deadline, exited, or wrote something that is not a reply."""


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def group_port(world_size: int) -> int:
    """MASTER_PORT for a process group of `world_size` ranks on this machine. One rank: 0, so that rank 0's TCPStore
    binds a port the kernel picks as it binds. A port chosen beforehand (bind, read, close) may be taken by another
    process before the store binds it: under a parallel ctest one was (EADDRINUSE), and the run failed. Several
    ranks must know the port before rank 0 binds it: a free one now, and `port_taken` says when to start again."""
    return 0 if world_size == 1 else free_port()


def port_taken(failure: str) -> bool:
    """Whether a start-up failure is rank 0's store finding its port in use (torch's TCPStore, libuv or not)."""
    text = failure.lower()
    return "eaddrinuse" in text or "address already in use" in text


class Worker:
    """One rank: a worker process, its request pipe (stdin) and its reply pipe (read by a thread)."""

    def __init__(self, argv: list[str], rank: int, cwd: Path | None = None) -> None:
        read_fd, write_fd = os.pipe()
        self.rank = rank
        self.process = subprocess.Popen([*argv, "--reply-fd", str(write_fd)], stdin=subprocess.PIPE,
                                        stdout=sys.stderr.fileno(), pass_fds=(write_fd,), text=True, cwd=cwd)
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
    """The workers of one world size, started together on one port (`group_port`), ready after their warm-up.
    command(rank, port) is a worker's argv (without --reply-fd)."""

    def __init__(self, command: Callable[[int, int], list[str]], world_size: int, *, start_deadline_s: float,
                 run_deadline_s: float, cwd: Path | None = None) -> None:
        self.command = command
        self.cwd = cwd
        self.world_size = world_size
        self.start_deadline_s = start_deadline_s
        self.run_deadline_s = run_deadline_s
        self.attempts = 0
        self.start()

    def start(self) -> None:
        self.attempts += 1
        self.port = group_port(self.world_size)
        self.workers = [Worker(self.command(r, self.port), r, self.cwd) for r in range(self.world_size)]
        self.ready: list[dict[str, Any]] | None = None
        self.started = time.monotonic()

    def wait_ready(self) -> None:
        """Waits for every rank's start-up, rank 0 first. A rank that did not start stops the group at once (the
        others would wait for it in the group's forming); when it was rank 0 finding its port taken, the group
        starts again on a fresh port, up to START_ATTEMPTS times in all."""
        while self.ready is None:
            deadline = self.started + self.start_deadline_s
            replies = []
            for w in self.workers:
                r = w.receive(deadline, "start-up")
                if r.get("ready"):
                    replies.append(r)
                    continue
                # The processes only: a subclass's stop() may also remove what the group keeps for its next start.
                self.stop_workers(kill=True)
                failure = str(r.get("failed"))
                if port_taken(failure) and self.attempts < START_ATTEMPTS:
                    print(f"accumcheck_adapter: port {self.port} was taken before rank {w.rank} bound it; starting "
                          f"the {self.world_size} ranks again on another (attempt {self.attempts + 1} of "
                          f"{START_ATTEMPTS})", file=sys.stderr)
                    self.start()
                    break
                raise WorkerFault(f"rank {w.rank} worker did not start (port {self.port}, attempt {self.attempts} "
                                  f"of {START_ATTEMPTS}): {failure}\n{r.get('traceback', '')}")
            else:
                self.ready = replies

    def run(self, request: RunRequest) -> list[dict[str, Any]]:
        """Every rank's result (JSON), in rank order. Raises Unsupported when every rank refused the run,
        RuntimeError when it failed in a way the group survives, WorkerFault otherwise."""
        self.wait_ready()
        line = json.dumps(request.to_json(), separators=(",", ":"))
        for w in self.workers:
            w.send(line)
        replies = self.collect(time.monotonic() + self.run_deadline_s, f"run {request.id}")
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
        return [r["result"] for r in replies]

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
        run makes it time out or mismatch."""
        line = json.dumps({"sync": request_id})
        for w in self.workers:
            w.send(line)
        try:
            replies = self.collect(time.monotonic() + SYNC_DEADLINE_S, f"the group check after run {request_id}")
        except WorkerFault:
            return False
        return all(r.get("synced") is True for r in replies)

    def stop(self, kill: bool = False) -> None:
        self.stop_workers(kill)

    def stop_workers(self, kill: bool) -> None:
        for w in self.workers:
            w.stop(kill)


def same_exception(replies: list[dict[str, Any]]) -> bool:
    """Whether every rank raised the same exception type at the same line of code (the traceback's last frame)."""
    def where(r: dict[str, Any]) -> tuple[str, str]:
        frames = [x for x in r.get("traceback", "").splitlines() if x.lstrip().startswith('File "')]
        return r["failed"].split(":", 1)[0], frames[-1].strip() if frames else ""
    return len({where(r) for r in replies}) == 1


# ------------------------------------------------------------------------------------------------ worker side

def reply_stream(fd: int) -> TextIO:
    """The worker's reply pipe; and its stdout (fd 1 and sys.stdout) sent to stderr, where training code's prints
    belong."""
    reply = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return reply


def send(reply: TextIO, obj: dict[str, Any]) -> None:
    reply.write(json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n")
    reply.flush()


def send_start_failure(reply: TextIO, e: BaseException) -> None:
    send(reply, {"failed": f"the worker did not start: {type(e).__name__}: {e}", "traceback": traceback.format_exc()})


def serve_rank(run: Callable[[RunRequest], Result], rank: int, world_size: int, reply: TextIO,
               ready: dict[str, Any]) -> int:
    """Answers the request lines on stdin until end of file, after announcing `ready` (start-up is done)."""
    send(reply, {"ready": True, **ready})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            if isinstance(msg, dict) and "sync" in msg:
                send(reply, {"synced": group_pairs(rank, world_size, msg["sync"])})
                continue
            request = RunRequest.from_json(msg)
        except (ValueError, ProtocolError) as e:
            send(reply, {"failed": f"the worker could not decode the request: {e}"})
            continue
        try:
            result = run(request)
            send(reply, {"result": result.to_json(request.id)})
        except Unsupported as e:
            send(reply, {"unsupported": str(e)})
        except Exception as e:  # a failing run is a reply; the adapter decides about the process
            send(reply, {"failed": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
    return 0


def group_pairs(rank: int, world_size: int, token: Any) -> bool:
    """The adapter's check of the process group after a run failed on every rank: one all_reduce of
    (token, rank + 1), whose sums every rank knows. False when it raises (the collective timeout included)."""
    import torch

    try:
        t = torch.tensor([float(token), float(rank + 1)], dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return t.tolist() == [float(token) * world_size, world_size * (world_size + 1) / 2]
    except Exception:  # the reply says the group is broken; the adapter restarts it
        return False
