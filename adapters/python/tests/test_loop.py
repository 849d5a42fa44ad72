"""TorchLoop against the full-batch oracle: optimizers, clipping, checkpoints, the optimizer state mapping,
and the example mistakes doing what they say."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import random
from fractions import Fraction as Q

import pytest
import reference
from builders import request, seq
from cases import random_request
from conftest import ADAPTERS, HAS_TORCH, fixture, requires_torch

from accumcheck_adapter import ModelSpec, RunRequest
from accumcheck_adapter.scenario import OptimizerSpec

if HAS_TORCH:
    from accumcheck_adapter import TorchLoop

pytestmark = requires_torch

OPTIMIZERS = {
    "sgd": OptimizerSpec("sgd", lr=Q(1, 4)),
    "sgd-momentum": OptimizerSpec("sgd", lr=Q(1, 4), momentum=Q(1, 2), dampening=Q(1, 4), weight_decay=Q(1, 8)),
    "sgd-nesterov": OptimizerSpec("sgd", lr=Q(1, 8), momentum=Q(3, 4), nesterov=True),
    "adam": OptimizerSpec("adam", lr=Q(1, 8), beta1=Q(1, 2), beta2=Q(3, 4), eps=Q(1, 8), weight_decay=Q(1, 4)),
    "adamw": OptimizerSpec("adamw", lr=Q(1, 8), beta1=Q(1, 2), beta2=Q(3, 4), eps=Q(1, 8), weight_decay=Q(1, 4)),
}


def close(a, e, tol):
    return math.isclose(float(a), float(e), rel_tol=tol, abs_tol=tol)


def assert_tensors(actual, expected, tol, what):
    assert {n: v is None for n, v in actual.items()} == {n: v is None for n, v in expected.items()}, what
    for n, m in expected.items():
        if m is not None:
            for ra, re in zip(actual[n], m, strict=True):
                assert all(close(a, e, tol) for a, e in zip(ra, re, strict=True)), (what, n, ra, re)


def assert_matches_oracle(r: RunRequest, tol: float = 1e-9) -> None:
    result = TorchLoop(r).run()
    truth = reference.oracle(r.scenario)
    for s, (got, want) in enumerate(zip(result.steps, truth["steps"], strict=True)):
        assert got.applied
        assert_tensors(got.gradient, want["gradient"], tol, f"step {s} gradient")
        assert close(got.grad_norm, want["grad_norm"], tol)
        assert close(got.clip_coefficient, want["clip_coefficient"], tol)
    assert_tensors(result.parameters, truth["parameters"], tol, "parameters")
    state = result.optimizer_state
    assert_tensors(state.first_moment, truth["first_moment"], tol, "first_moment")
    assert_tensors(state.second_moment, truth["second_moment"], tol, "second_moment")
    assert state.step_count == truth["step_count"]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("kind", ["linear", "mlp", "tied_embedding"])
@pytest.mark.parametrize("seed", range(6))
def test_the_loop_trains_as_the_full_batch_oracle(optimizer, kind, seed):
    rng = random.Random(f"{optimizer}-{kind}-{seed}")
    assert_matches_oracle(random_request(rng, kind, steps=3, optimizer=OPTIMIZERS[optimizer],
                                         max_grad_norm=rng.choice([None, Q(1, 2), 4])))


@pytest.mark.parametrize("seed", range(6))
def test_fp32_runs_are_close_to_the_oracle(seed):
    rng = random.Random(f"fp32-{seed}")
    assert_matches_oracle(random_request(rng, "mlp", steps=2, optimizer=OPTIMIZERS["adamw"], dtype="fp32"), 1e-4)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_checkpoint_changes_nothing(optimizer):
    for seed in range(4):
        rng = random.Random(f"checkpoint-{optimizer}-{seed}")
        r = random_request(rng, "linear", steps=3, optimizer=OPTIMIZERS[optimizer], checkpoint_after_step=1)
        plain = RunRequest(r.id, r.dtype, dataclasses.replace(r.scenario, checkpoint_after_step=None), [])
        assert TorchLoop(r).run() == TorchLoop(plain).run()


def test_the_optimizer_state_is_mapped_by_name():
    spec = ModelSpec("linear", 1, 1, expert_count=2)
    params = {n: [[Q(1)]] for n in spec.parameter_names()}
    data = [[[[seq([[1]], [[0]], expert_index=[0])]]], [[[seq([[1]], [[0]], expert_index=[0])]]]]
    sgd = TorchLoop(request(spec, params, data, optimizer=OPTIMIZERS["sgd-momentum"])).run().optimizer_state
    assert sgd.step_count == {"expert0.weight": 2, "expert0.bias": 2, "expert1.weight": 0, "expert1.bias": 0}
    assert sgd.first_moment["expert1.weight"] is None and sgd.first_moment["expert0.weight"] is not None
    assert set(sgd.second_moment.values()) == {None}
    plain = TorchLoop(request(spec, params, data, optimizer=OPTIMIZERS["sgd"])).run().optimizer_state
    assert set(plain.first_moment.values()) == {None} and plain.step_count["expert0.bias"] == 2
    for kind in ("adam", "adamw"):
        adam = TorchLoop(request(spec, params, data, optimizer=OPTIMIZERS[kind])).run().optimizer_state
        assert adam.step_count == sgd.step_count
        assert adam.second_moment["expert0.bias"] is not None and adam.second_moment["expert1.bias"] is None


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ADAPTERS / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weights(result):
    return [s.gradient["weight"][0][0] for s in result.steps]


def test_the_catalogue_window_shows_each_mistake():
    r = RunRequest.from_json(fixture("run.catalogue-g3.request.json"))
    assert weights(TorchLoop(r).run()) == [111.0, 69.375]
    assert weights(load_example("zero_grad_inside_window").ZeroGradInsideWindow(r).run()) == [100.0, 87.5]


def test_mean_of_micro_batch_means_overweights_the_short_micro_batch():
    # Catalogue section 2's smallest trigger: G = 2, micro-batches of 1 and 3 tokens with losses a and b.
    spec = ModelSpec("linear", 1, 1, frozen=("bias",))
    data = [[[[seq([[1]], [[-4]])]], [[seq([[1]] * 3, [[-8]] * 3)]]]]
    r = request(spec, {"weight": [[0]], "bias": [[0]]}, data, aggregation="token-mean")
    assert weights(TorchLoop(r).run()) == [(4 + 3 * 8) / 4]
    assert weights(load_example("mean_of_micro_batch_means").MeanOfMicroBatchMeans(r).run()) == [(4 + 8) / 2]


def test_clipping_every_micro_step_clips_partial_sums():
    spec = ModelSpec("linear", 1, 1, frozen=("bias",))
    data = [[[[seq([[1]], [[-3]])]], [[seq([[1]], [[4]])]]]]  # gradients 3 and -4: the window's sum is -1
    r = request(spec, {"weight": [[0]], "bias": [[0]]}, data, max_grad_norm=2)
    right = TorchLoop(r).run().steps[0]
    assert (right.gradient["weight"], right.grad_norm) == ([[-1.0]], 1.0)
    wrong = load_example("clip_every_micro_step").ClipEveryMicroStep(r).run().steps[0]
    assert wrong.gradient["weight"][0][0] == pytest.approx(-2.0, abs=1e-5)  # clip(clip(3) - 4) = clip(-2)
