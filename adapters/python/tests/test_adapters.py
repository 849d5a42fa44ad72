"""The shipped adapters as processes, against the fixtures: torch-loop, the minimal adapter, the faulty one."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import pytest
import reference
from conftest import ADAPTERS, fixture, requires_torch

from accumcheck_adapter import Capabilities, Result, RunRequest

HELLO = fixture("hello.request.json")
RUN = fixture("run.catalogue-g3.request.json")
SHUTDOWN = {"type": "shutdown"}


def converse(command: list[str], *messages: dict, timeout: float = 120, cwd=None) -> tuple[int, list[str], str]:
    stdin = "".join(json.dumps(m) + "\n" for m in messages)
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_the_fixtures_decode():
    assert HELLO == {"type": "hello", "id": 0, "protocol": 1, "client": "accumcheck 0.3.0"}
    hello = fixture("hello.torch-loop.reply.json")
    assert (hello["type"], hello["id"], hello["protocol"], hello["adapter"]["name"]) == ("hello", 0, 1, "torch-loop")
    Capabilities.from_json(hello["capabilities"])
    reply = fixture("run.catalogue-g3.reply.json")
    result = Result.from_json(reply)
    assert [s.gradient["weight"] for s in result.steps] == [[[111.0]], [[69.375]]]
    assert Result.from_json(result.to_json(reply["id"])) == result
    assert result.to_json(reply["id"]) == reply
    RunRequest.from_json(RUN)


@requires_torch
def test_torch_loop_answers_the_fixtures():
    status, lines, stderr = converse([sys.executable, "adapter.py"], HELLO, RUN, SHUTDOWN, cwd=ADAPTERS / "torch-loop")
    assert status == 0, stderr
    assert [json.loads(line) for line in lines] == [fixture("hello.torch-loop.reply.json"),
                                                     fixture("run.catalogue-g3.reply.json")]
    # torch-loop is the kit's TorchLoop with 16-bit autocast added (adapters/torch-loop/adapter.py).
    from accumcheck_adapter import TorchLoop
    expected = TorchLoop.CAPABILITIES.to_json() | {"precisions": ["full", "bf16", "fp16"]}
    assert fixture("hello.torch-loop.reply.json")["capabilities"] == expected


@requires_torch
def test_zero_grad_inside_window_shows_its_mistake_on_the_fixture():
    status, lines, stderr = converse([sys.executable, str(ADAPTERS / "examples" / "zero_grad_inside_window.py")],
                                     HELLO, RUN, SHUTDOWN)
    assert status == 0, stderr
    assert [s["gradient"]["weight"] for s in json.loads(lines[1])["steps"]] == [[[100.0]], [[87.5]]]


def minimal(*messages: dict, fault: str | None = None, state: str | None = None, timeout: float = 30):
    script = "faulty_adapter.py" if fault else "minimal_adapter.py"
    command = [sys.executable, str(ADAPTERS / "examples" / script)]
    if fault:
        command += ["--fault", fault] + (["--state", state] if state else [])
    return converse(command, *messages, timeout=timeout)


EXACT_RUN = dict(RUN, dtype="exact")


def test_the_minimal_adapter_is_exact():
    status, lines, stderr = minimal(HELLO, EXACT_RUN, SHUTDOWN)
    assert status == 0, stderr
    hello, result = (json.loads(line) for line in lines)
    Capabilities.from_json(hello["capabilities"])
    truth = reference.oracle(RunRequest.from_json(EXACT_RUN).scenario)
    got = Result.from_json(result)
    assert [s.gradient for s in got.steps] == [s["gradient"] for s in truth["steps"]]
    assert got.parameters == truth["parameters"] == {"weight": [[Fraction(-1443, 64)]], "bias": [[Fraction(0)]]}
    assert got.optimizer_state.step_count == {"weight": 2, "bias": 0}


@pytest.mark.parametrize(("fault", "status", "replies"), [
    ("crash-on-run", 3, ["hello"]),
    ("garbage", 0, ["hello", "not json"]),
    ("wrong-id", 0, ["hello", "result id 2"]),
    ("exit-early", 0, ["hello"]),
    ("bad-capabilities", 0, ["hello world_sizes [0]", "result id 1"]),
    ("error-reply", 0, ["hello", "error failed"]),
    ("partial-line", 0, ["hello", "partial"]),
    ("stdout-noise", 0, ["not json", "hello", "not json", "result id 1"]),
])
def test_the_faulty_adapter_misbehaves_as_asked(fault, status, replies):
    code, lines, _ = minimal(HELLO, EXACT_RUN, SHUTDOWN, fault=fault)
    assert code == status

    def describe(line: str) -> str:
        try:
            msg = json.loads(line)
        except ValueError:
            return "partial" if line.startswith('{"type": "result"') else "not json"
        if msg["type"] == "hello":
            return "hello world_sizes [0]" if msg["capabilities"]["world_sizes"] == [0] else "hello"
        return f"result id {msg['id']}" if msg["type"] == "result" else f"error {msg['kind']}"

    assert [describe(line) for line in lines] == replies


def test_the_faulty_adapter_crashes_once_then_works(tmp_path):
    marker = str(tmp_path / "crashed")
    first = minimal(HELLO, EXACT_RUN, SHUTDOWN, fault="crash-once", state=marker)
    second = minimal(HELLO, EXACT_RUN, SHUTDOWN, fault="crash-once", state=marker)
    assert (first[0], len(first[1])) == (3, 1)
    assert second[0] == 0 and json.loads(second[1][1])["steps"][0]["gradient"]["weight"] == [["111"]]


def test_the_faulty_adapter_hangs():
    with pytest.raises(subprocess.TimeoutExpired):
        minimal(HELLO, EXACT_RUN, fault="hang", timeout=2)
