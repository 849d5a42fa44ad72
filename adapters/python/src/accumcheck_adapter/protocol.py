"""The adapter's side of the line protocol (docs/adapter-protocol.md sections 1, 2, 7).

serve() reads one JSON request per line, answers each with one line, and returns the exit status:
  hello    -> the adapter's name and capabilities (protocol 1; another version: error "protocol", exit 2)
  run      -> decoded into a RunRequest, checked against the capabilities, handed to adapter.run; an
              Unsupported exception is error "unsupported", any other exception error "failed" with the
              traceback, a malformed request error "protocol"; the loop keeps serving after each
  shutdown or end of input -> exit 0
While it runs, everything written to stdout (print, or a C library writing to file descriptor 1) goes to
stderr: only protocol lines reach the real stdout.

Decoding a request (json.loads, RunRequest.from_json, the capabilities check) runs with the cyclic garbage
collector paused (_no_gc). It allocates a few thousand small containers (the JSON tree, lists of floats, frozen
dataclasses), which starts a collection every few requests, on the trial's path; one that reaches the oldest
generation walks every object torch keeps (some 250,000). Pausing only delays: what decoding builds is trees,
freed by reference counting, and a cycle, if any, is collected once the collector resumes, before adapter.run.
"""

from __future__ import annotations

import abc
import contextlib
import gc
import json
import os
import sys
import traceback
from collections.abc import Iterator
from typing import Any, TextIO

from accumcheck_adapter.capabilities import Capabilities
from accumcheck_adapter.errors import ProtocolError, Unsupported
from accumcheck_adapter.result import Result
from accumcheck_adapter.scenario import RunRequest

PROTOCOL_VERSION = 1


class Adapter(abc.ABC):
    """An adapter: a name, a version and a description for the handshake, its capabilities, and run."""

    name: str = "unnamed"
    version: str = "0"
    description: str = ""

    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    @abc.abstractmethod
    def run(self, request: RunRequest) -> Result: ...


def _error(request_id: object, kind: str, message: str, trace: str | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = {"type": "error", "id": request_id, "kind": kind, "message": message}
    if trace:
        reply["traceback"] = trace
    return reply


@contextlib.contextmanager
def _protocol_stream(stdout: TextIO | None) -> Iterator[TextIO]:
    """The stream replies go to, with sys.stdout sent to stderr meanwhile. With stdout None (the real
    process stdout), file descriptor 1 itself is moved to stderr, so C-level writes are caught too."""
    if stdout is not None:
        with contextlib.redirect_stdout(sys.stderr):
            yield stdout
        return
    sys.stdout.flush()
    saved = os.dup(1)
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield protocol
    finally:
        protocol.close()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout meanwhile goes to stderr, file descriptor 1 included (a C library, or a
    subprocess such as the ninja that DeepSpeed's op loader runs): for an adapter's start-up, before serve, whose
    stdout must hold protocol lines only."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused meanwhile (see the module's docstring), resumed as it was found."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _write(out: TextIO, reply: dict[str, Any]) -> None:
    # allow_nan=False: a non-finite float must have been encoded as a string (exact.encode_number) already.
    try:
        line = json.dumps(reply, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        line = json.dumps(_error(reply.get("id"), "failed", f"the reply cannot be written as JSON: {e}",
                                 traceback.format_exc()))
    out.write(line + "\n")
    out.flush()


def _answer(adapter: Adapter, msg: dict[str, Any], greeted: bool) -> dict[str, Any]:
    request_id = msg.get("id")
    if not greeted:
        return _error(request_id, "protocol", f"a {msg.get('type')!r} request before the hello handshake")
    try:
        with _no_gc():
            request = RunRequest.from_json(msg)
            adapter.capabilities().check(request)
    except ProtocolError as e:
        return _error(request_id, "protocol", f"malformed run request: {e}")
    except Unsupported as e:
        return _error(request_id, "unsupported", str(e))
    try:
        result = adapter.run(request)
        return result.to_json(request.id)
    except Unsupported as e:
        return _error(request_id, "unsupported", str(e))
    except Exception as e:  # a failing trial is a reply, never the end of the adapter
        return _error(request_id, "failed", f"{type(e).__name__}: {e}", traceback.format_exc())


def serve(adapter: Adapter, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """Serves requests until shutdown or end of input; returns the process exit status."""
    stdin = sys.stdin if stdin is None else stdin
    with _protocol_stream(stdout) as out:
        greeted = False
        for line in stdin:
            if not line.strip():
                continue
            try:
                with _no_gc():
                    msg = json.loads(line)
                if not isinstance(msg, dict):
                    raise ValueError("a message is a JSON object")
            except ValueError as e:
                _write(out, _error(None, "protocol", f"not a JSON object: {e}"))
                continue
            kind = msg.get("type")
            if kind == "shutdown":
                return 0
            if kind == "hello":
                if msg.get("protocol") != PROTOCOL_VERSION:
                    _write(out, _error(msg.get("id"), "protocol",
                                       f"this adapter speaks protocol {PROTOCOL_VERSION}, "
                                       f"the client {msg.get('protocol')!r}"))
                    return 2
                _write(out, {"type": "hello", "id": msg.get("id"), "protocol": PROTOCOL_VERSION,
                             "adapter": {"name": adapter.name, "version": adapter.version,
                                         "description": adapter.description},
                             "capabilities": adapter.capabilities().to_json()})
                greeted = True
            elif kind == "run":
                _write(out, _answer(adapter, msg, greeted))
            else:
                _write(out, _error(msg.get("id"), "protocol", f"unknown message type {kind!r}"))
        return 0
