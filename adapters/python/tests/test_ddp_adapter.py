"""The torch-ddp adapter (adapters/torch-ddp) as processes: two gloo ranks against the exact reference, ZeRO-1
and checkpoints against plain runs, routed experts under DDP, the ddp_local_token_mean mistake, and what
happens when a rank dies. Each adapter start imports torch twice (seconds), so one session serves many tests."""

from __future__ import annotations

import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import time
from dataclasses import replace
from fractions import Fraction as Q
from pathlib import Path

import pytest
import reference
from builders import request, seq
from cases import dyadic, random_sequence, random_spec
from conftest import ADAPTERS, fixture, requires_torch

from accumcheck_adapter import Capabilities, ModelSpec, Reports, Result, RunRequest
from accumcheck_adapter.scenario import AGGREGATIONS, OptimizerSpec

pytestmark = requires_torch

DDP = ADAPTERS / "torch-ddp"
MISTAKE = ADAPTERS / "examples" / "ddp_local_token_mean.py"
OPTIMIZERS = {
    "sgd-momentum": OptimizerSpec("sgd", lr=Q(1, 4), momentum=Q(1, 2), dampening=Q(1, 4), weight_decay=Q(1, 8)),
    "adamw": OptimizerSpec("adamw", lr=Q(1, 8), beta1=Q(1, 2), beta2=Q(3, 4), eps=Q(1, 8), weight_decay=Q(1, 4)),
}


class Session:
    """One adapter process, greeted; ask() sends a message and reads its reply line with a deadline."""

    def __init__(self, command: list[str], cwd: Path | None = None) -> None:
        self.process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, bufsize=0)
        self.buffer = b""
        self.hello = self.ask(fixture("hello.request.json"), timeout=120)

    def ask(self, message: dict, timeout: float = 60) -> dict:
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        return json.loads(self.read_line(timeout))

    def read_line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"no reply within {timeout} s")
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError("the adapter closed its stdout")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()

    def rank_1_pid(self) -> int:
        children = [pid for pid in running_pids() if parent_pid(pid) == self.process.pid]
        assert len(children) == 1, children
        return children[0]

    def close(self) -> int:
        with_shutdown = self.process.poll() is None
        if with_shutdown:
            self.process.stdin.write(b'{"type": "shutdown"}\n')
            self.process.stdin.close()
        return self.process.wait(timeout=10)


def running_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def is_alive(pid: int) -> bool:
    """Running or sleeping; a zombie (dead, waiting for a reaper) does not count."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def ddp():
    session = Session([sys.executable, "adapter.py"], cwd=DDP)
    yield session
    assert session.close() == 0


def ask_result(session: Session, r: RunRequest) -> Result:
    reply = session.ask(r.to_json())
    assert reply["type"] == "result", reply
    return Result.from_json(reply)


def with_engine(r: RunRequest, **changes) -> RunRequest:
    scenario = replace(r.scenario, engine=replace(r.scenario.engine, **changes))
    return RunRequest.from_json(replace(r, scenario=scenario).to_json())


def two_rank_request(rng: random.Random, kind: str, *, steps: int, optimizer: OptimizerSpec,
                     max_grad_norm: object = None) -> RunRequest:
    spec = random_spec(rng, kind)
    while all(spec.is_frozen(n) for n in spec.parameter_names()):  # DDP refuses a module with nothing to train
        spec = random_spec(rng, kind)
    params = {n: [[dyadic(rng) for _ in range(c)] for _ in range(r)]
              for n, (r, c) in zip(spec.parameter_names(), spec.parameter_shapes(), strict=True)}
    windows = [[[[random_sequence(rng, spec) for _ in range(rng.randint(0, 2))] for _rank in range(2)]
                for _k in range(rng.randint(1, 3))] for _ in range(steps)]
    return request(spec, params, windows, aggregation=rng.choice(AGGREGATIONS), norm_constant=rng.choice([1, 3]),
                   optimizer=optimizer, max_grad_norm=max_grad_norm)


def close(a, e, tol=1e-9) -> bool:
    return math.isclose(float(a), float(e), rel_tol=tol, abs_tol=tol)


def assert_tensors(actual, expected, what):
    assert {n: v is None for n, v in actual.items()} == {n: v is None for n, v in expected.items()}, what
    for n, m in expected.items():
        if m is not None:
            for ra, re in zip(actual[n], m, strict=True):
                assert all(close(a, e) for a, e in zip(ra, re, strict=True)), (what, n, ra, re)


def assert_matches_oracle(result: Result, r: RunRequest) -> None:
    truth = reference.oracle(r.scenario)
    for s, (got, want) in enumerate(zip(result.steps, truth["steps"], strict=True)):
        assert got.applied
        assert_tensors(got.gradient, want["gradient"], f"step {s} gradient")
        assert close(got.grad_norm, want["grad_norm"]) and close(got.clip_coefficient, want["clip_coefficient"])
    assert_tensors(result.parameters, truth["parameters"], "parameters")
    assert_tensors(result.optimizer_state.first_moment, truth["first_moment"], "first_moment")
    assert_tensors(result.optimizer_state.second_moment, truth["second_moment"], "second_moment")
    assert result.optimizer_state.step_count == truth["step_count"]


# ------------------------------------------------------------------------------------------- training


def test_the_handshake_declares_two_ranks_zero_1_experts_and_checkpoints(ddp):
    caps = Capabilities.from_json(ddp.hello["capabilities"])
    assert (caps.world_sizes, caps.zero_stages, caps.limits.rank_count_max) == ((1, 2), (0, 1), 2)
    assert (caps.experts, caps.frozen_parameters, caps.checkpoint, caps.uneven_windows) == (True,) * 4
    assert (caps.dtypes, caps.precisions, caps.offload, caps.missing_gradient_is_zero) == (
        ("fp32", "fp64"), ("full",), (False,), False)
    assert caps.reports == Reports() and caps.boundary == ("automatic", "manual")


def test_one_rank_answers_the_fixture_as_torch_loop(ddp):
    # DDP over the group {0}: the gradient is scaled by 1/1 and reduced over one rank, so bit for bit the same.
    assert ddp.ask(fixture("run.catalogue-g3.request.json")) == fixture("run.catalogue-g3.reply.json")


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("kind", ["linear", "mlp", "tied_embedding"])
@pytest.mark.parametrize("seed", range(3))
def test_two_ranks_train_as_the_full_batch_oracle(ddp, optimizer, kind, seed):
    rng = random.Random(f"ddp-{optimizer}-{kind}-{seed}")
    r = two_rank_request(rng, kind, steps=2, optimizer=OPTIMIZERS[optimizer], max_grad_norm=rng.choice([None, 2]))
    assert_matches_oracle(ask_result(ddp, r), r)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_zero_1_and_checkpoints_change_nothing_bit_for_bit(ddp, optimizer):
    rng = random.Random(f"zero-{optimizer}")
    base = two_rank_request(rng, "mlp", steps=3, optimizer=OPTIMIZERS[optimizer])
    plain = ddp.ask(base.to_json())
    assert plain["type"] == "result", plain
    for zero_stage in (0, 1):
        for checkpoint in (None, 0, 1):
            r = with_engine(base, zero_stage=zero_stage)
            r = RunRequest.from_json(replace(r, scenario=replace(r.scenario, checkpoint_after_step=checkpoint))
                                     .to_json())
            assert ddp.ask(r.to_json()) == plain, (zero_stage, checkpoint)


def test_an_expert_one_rank_reached_before_the_last_micro_batch_gets_its_gradient(ddp):
    # Micro-batch 0 (no_sync): rank 0 routes to expert 0, rank 1 to expert 1. Micro-batch 1 (synchronised):
    # rank 0 to expert 0, rank 1 has no sequence, so no graph (the anchor case). Expert 2: never reached.
    spec = ModelSpec("linear", 1, 1, expert_count=3)
    params = {n: [[Q(1, 2)]] for n in spec.parameter_names()}
    window = [[[seq([[1]], [[2]], expert_index=[0])], [seq([[2]], [[-1]], expert_index=[1])]],
              [[seq([[-1]], [[1]], expert_index=[0])], []]]
    empty = [[[], []]]  # a window no rank routes anything in: nothing to reduce, every gradient absent
    r = request(spec, params, [window, empty, window], aggregation="token-mean")
    result = ask_result(ddp, r)
    assert_matches_oracle(result, r)
    assert [name for name, g in result.steps[0].gradient.items() if g is not None] == [
        "expert0.weight", "expert0.bias", "expert1.weight", "expert1.bias"]
    assert all(g is None for g in result.steps[1].gradient.values())


def test_a_scenario_with_every_parameter_frozen_is_unsupported(ddp):
    spec = ModelSpec("linear", 1, 1, frozen=("weight", "bias"))
    r = request(spec, {"weight": [[1]], "bias": [[0]]}, [[[[seq([[1]], [[1]])], []]]])
    reply = ddp.ask(r.to_json())
    assert (reply["type"], reply["kind"]) == ("error", "unsupported"), reply


# ----------------------------------------------------------------------------------------- the mistake


def test_the_local_token_mean_mistake_shows_only_on_unequal_rank_counts():
    session = Session([sys.executable, str(MISTAKE)])
    try:
        spec = ModelSpec("linear", 1, 1)
        params = {"weight": [[0]], "bias": [[0]]}
        one, three = seq([[1]], [[1]]), seq([[1], [1], [1]], [[2], [2], [2]])
        uneven = request(spec, params, [[[[one], [three]]]], aggregation="token-mean")
        even = request(spec, params, [[[[three], [three]]]], aggregation="token-mean")
        # Correct: (1*1 + 3*2) / 4 tokens = 7/4 for -dJ/dw; the mistake: (1/1 + 6/3) / 2 = 3/2.
        assert ask_result(session, uneven).steps[0].gradient["weight"] == [[-1.5]]
        assert reference.oracle(uneven.scenario)["steps"][0]["gradient"]["weight"] == [[Q(-7, 4)]]
        assert_matches_oracle(ask_result(session, even), even)
    finally:
        assert session.close() == 0


# ------------------------------------------------------------------------------------------ robustness


def test_a_dead_rank_1_fails_the_next_run_and_the_adapter_exits():
    session = Session([sys.executable, "adapter.py"], cwd=DDP)
    os.kill(session.rank_1_pid(), signal.SIGKILL)
    spec = ModelSpec("linear", 1, 1)
    reply = session.ask(request(spec, {"weight": [[0]], "bias": [[0]]}, [[[[seq([[1]], [[1]])], []]]]).to_json())
    assert (reply["type"], reply["kind"]) == ("error", "failed"), reply
    assert "cannot be recovered" in reply["message"]
    assert session.process.wait(timeout=10) == 3


def test_rank_1_dies_with_rank_0():
    session = Session([sys.executable, "adapter.py"], cwd=DDP)
    rank1 = session.rank_1_pid()
    session.process.send_signal(signal.SIGKILL)
    session.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while is_alive(rank1) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_alive(rank1), f"rank 1 (pid {rank1}) outlived rank 0"
