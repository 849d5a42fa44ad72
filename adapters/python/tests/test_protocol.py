"""The line loop: handshake, runs, error replies, and a stdout that only ever carries protocol lines.
None of this needs torch."""

from __future__ import annotations

import gc
import io
import json
import math
import subprocess
import sys
import textwrap

from conftest import ADAPTERS, fixture

from accumcheck_adapter import (
    Adapter,
    Capabilities,
    Limits,
    Reports,
    Result,
    RunRequest,
    StepReport,
    Unsupported,
    serve,
)

CAPS = Capabilities(
    models=("linear",), experts=False, frozen_parameters=True, aggregations=("sum",), optimizers=("sgd",),
    momentum=False, weight_decay=False, clipping=False, world_sizes=(1,), zero_stages=(0,), offload=(False,),
    dtypes=("fp32",), precisions=("full",), loss_scaling=False, boundary=("automatic",),
    step_after_every_backward=(True,), uneven_windows=False, checkpoint=False, reports=Reports(),
    missing_gradient_is_zero=False, limits=Limits())


class Echo(Adapter):
    """Answers the weight's first target of each window as its gradient; misbehaves on request."""

    name, version, description = "echo", "0.1", "a test adapter"

    def __init__(self) -> None:
        self.runs = 0

    def capabilities(self) -> Capabilities:
        return CAPS

    def run(self, request: RunRequest) -> Result:
        self.runs += 1
        print("a library printing to stdout")  # must not reach the protocol stream
        if request.id == 13:
            raise RuntimeError("the trial broke")
        if request.id == 14:
            raise Unsupported("not this one")
        s = request.scenario
        steps = [StepReport(True, {"weight": w[0][0][0].targets, "bias": None}, math.inf, 1.0) for w in s.steps]
        return Result(steps, s.initial_parameters)


def talk(*messages: object, adapter: Adapter | None = None) -> tuple[int, list[dict]]:
    lines = "".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in messages)
    out = io.StringIO()
    status = serve(adapter or Echo(), stdin=io.StringIO(lines), stdout=out)
    return status, [json.loads(line) for line in out.getvalue().splitlines()]


HELLO = fixture("hello.request.json")


def run_request(request_id: int) -> dict:
    return dict(fixture("run.catalogue-g3.request.json"), id=request_id)


def test_hello_answers_with_name_and_capabilities():
    status, [reply] = talk(HELLO)
    assert status == 0
    assert reply == {"type": "hello", "id": 0, "protocol": 1,
                     "adapter": {"name": "echo", "version": "0.1", "description": "a test adapter"},
                     "capabilities": CAPS.to_json()}
    assert Capabilities.from_json(reply["capabilities"]) == CAPS


def test_another_protocol_version_is_refused_and_ends_the_adapter():
    status, replies = talk(dict(HELLO, protocol=2), run_request(1))
    assert status == 2
    assert [(r["type"], r["kind"]) for r in replies] == [("error", "protocol")]


def test_a_run_is_answered_with_its_id_and_non_finite_numbers_as_strings(capsys):
    status, [_, result] = talk(HELLO, run_request(5), {"type": "shutdown"})
    assert status == 0
    assert result["type"] == "result" and result["id"] == 5
    assert [s["gradient"]["weight"] for s in result["steps"]] == [[[-1.0]], [[-1.0]]]
    assert result["steps"][0]["grad_norm"] == "inf"
    assert "a library printing to stdout" in capsys.readouterr().err


def test_errors_are_replies_and_the_adapter_keeps_serving():
    adapter = Echo()
    exact = dict(run_request(15), dtype="exact")
    status, replies = talk(HELLO, run_request(13), run_request(14), exact, "not json", {"type": "dance", "id": 3},
                           {"type": "run", "id": 16}, run_request(17), adapter=adapter)
    assert status == 0
    errors = [(r.get("id"), r.get("kind")) for r in replies[1:]]
    assert errors == [(13, "failed"), (14, "unsupported"), (15, "unsupported"), (None, "protocol"),
                      (3, "protocol"), (16, "protocol"), (17, None)]
    assert "RuntimeError: the trial broke" in replies[1]["message"] and "Traceback" in replies[1]["traceback"]
    assert "dtype 'exact'" in replies[3]["message"]
    assert "dtype: missing" in replies[6]["message"]
    assert replies[-1]["type"] == "result"
    assert adapter.runs == 3


def test_a_run_before_the_handshake_is_a_protocol_error():
    _, [reply] = talk(run_request(4))
    assert (reply["id"], reply["kind"]) == (4, "protocol")


def test_shutdown_and_end_of_input_end_the_loop():
    assert talk(HELLO, {"type": "shutdown"}, run_request(1)) == (0, [talk(HELLO)[1][0]])
    assert talk() == (0, [])


def test_output_on_file_descriptor_1_goes_to_stderr():
    """In a real process the kit moves fd 1 itself, so C code writing to stdout cannot break the stream."""
    script = textwrap.dedent("""
        import os, sys
        from accumcheck_adapter import serve
        sys.path.insert(0, sys.argv[1])
        from test_protocol import Echo

        class Noisy(Echo):
            def run(self, request):
                os.write(1, b"written to fd 1\\n")
                return super().run(request)

        raise SystemExit(serve(Noisy()))
    """)
    stdin = "\n".join(json.dumps(m) for m in (HELLO, run_request(8), {"type": "shutdown"})) + "\n"
    done = subprocess.run([sys.executable, "-c", script, str(ADAPTERS / "python" / "tests")], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["type"] for r in replies] == ["hello", "result"]
    assert "written to fd 1" in done.stderr and "a library printing to stdout" in done.stderr


class GcWatcher(Echo):
    """Records whether the cyclic garbage collector ran while the kit checked and while it ran a request."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, bool]] = []

    def capabilities(self) -> Capabilities:
        self.seen.append(("capabilities", gc.isenabled()))
        return super().capabilities()

    def run(self, request: RunRequest) -> Result:
        self.seen.append(("run", gc.isenabled()))
        return super().run(request)


def test_decoding_pauses_the_garbage_collector_and_leaves_it_as_it_was():
    adapter = GcWatcher()
    assert gc.isenabled()
    bad = run_request(9)
    bad["values"]["steps"][0][0][0][0]["targets"] = [[0.5]]
    status, replies = talk(HELLO, run_request(1), bad, "not json", run_request(2), adapter=adapter)
    assert status == 0 and [r.get("kind") for r in replies] == [None, None, "protocol", "protocol", None]
    assert gc.isenabled()
    assert adapter.seen == [("capabilities", True), ("capabilities", False), ("run", True),
                            ("capabilities", False), ("run", True)]
    gc.disable()  # an adapter that runs without the collector keeps it off
    try:
        adapter.seen.clear()
        assert talk(HELLO, run_request(3), adapter=adapter)[0] == 0
        assert not gc.isenabled() and adapter.seen == [("capabilities", False)] * 2 + [("run", False)]
    finally:
        gc.enable()
