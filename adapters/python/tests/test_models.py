"""The torch modules give the C++ models' gradients and presence pattern, against the exact reference."""

from __future__ import annotations

import math
import random
from fractions import Fraction as Q

import pytest
import reference
from builders import request, seq
from cases import is_dyadic, random_request
from conftest import HAS_TORCH, requires_torch

if HAS_TORCH:
    import torch

    from accumcheck_adapter import build_model
    from accumcheck_adapter.models import token_weights

pytestmark = requires_torch


def module_gradient(r, seqs, coefficients):
    s = r.scenario
    model = build_model(s.model, s.initial_parameters, r.dtype)
    loss = (model(seqs) * token_weights(seqs, coefficients, r.dtype)).sum()
    if loss.requires_grad:
        loss.backward()
    return {n: None if p.grad is None else p.grad.tolist() for n, p in model.named_parameters()}


def assert_same(actual, expected, exact):
    assert {n: g is None for n, g in actual.items()} == {n: g is None for n, g in expected.items()}
    for name, g in expected.items():
        if g is None:
            continue
        for row_a, row_e in zip(actual[name], g, strict=True):
            for a, e in zip(row_a, row_e, strict=True):
                if exact:
                    assert a == e, (name, a, e)
                else:
                    assert math.isclose(a, float(e), rel_tol=1e-12, abs_tol=1e-12), (name, a, e)


@pytest.mark.parametrize("kind", ["linear", "mlp", "tied_embedding"])
@pytest.mark.parametrize("seed", range(40))
def test_gradients_and_presence_equal_the_exact_reference(kind, seed):
    rng = random.Random(f"{kind}-{seed}")
    r = random_request(rng, kind)
    s = r.scenario
    seqs = list(s.sequences(0))
    c = reference.coefficients(s.aggregation.mode, s.aggregation.norm_constant, seqs)
    expected = reference.gradient(s.model, s.exact_initial_parameters, seqs, c)
    assert_same(module_gradient(r, seqs, c), expected, exact=all(is_dyadic(x) for x in c))


def linear_experts():
    from accumcheck_adapter import ModelSpec
    spec = ModelSpec("linear", 1, 1, expert_count=3)
    params = {f"expert{e}.{p}": [[Q(e + 1)]] for e in range(3) for p in ("weight", "bias")}
    return spec, params


def test_an_unreached_expert_has_no_gradient_and_a_masked_one_has_zeros():
    spec, params = linear_experts()
    seqs = [seq([[1], [2]], [[0], [0]], [1, 0], expert_index=[0, 2])]
    r = request(spec, params, [[[seqs]]])
    g = module_gradient(r, seqs, [Q(1)])
    assert g == {"expert0.weight": [[2.0]], "expert0.bias": [[2.0]], "expert1.weight": None, "expert1.bias": None,
                 "expert2.weight": [[0.0]], "expert2.bias": [[0.0]]}


@pytest.mark.parametrize("kind", ["linear", "mlp", "tied_embedding", "experts"])
def test_a_batch_without_tokens_gives_dense_layers_zero_gradients(kind):
    from accumcheck_adapter import ModelSpec
    spec = {"linear": ModelSpec("linear", 2, 1, frozen=("bias",)), "mlp": ModelSpec("mlp", 1, 1, hidden_size=2),
            "tied_embedding": ModelSpec("tied_embedding", vocab_size=2, embed_size=1)}.get(kind)
    if spec is None:
        spec, params = linear_experts()
    else:
        params = {n: [[Q(1)] * c for _ in range(rows)]
                  for n, (rows, c) in zip(spec.parameter_names(), spec.parameter_shapes(), strict=True)}
    for seqs in ([], [seq([], [], [])]):
        g = module_gradient(request(spec, params, [[[seqs]]]), seqs, [Q(1)] * len(seqs))
        for name, grad in g.items():
            if kind == "experts" or spec.is_frozen(name):
                assert grad is None, name
            else:
                assert grad is not None and all(x == 0 for row in grad for x in row), name


def test_relu_derivative_at_zero_is_zero():
    from accumcheck_adapter import ModelSpec
    spec = ModelSpec("mlp", 1, 1, hidden_size=1)
    params = {"fc1.weight": [[1]], "fc1.bias": [[-1]], "fc2.weight": [[1]], "fc2.bias": [[0]]}
    seqs = [seq([[1]], [[3]])]  # z = 0: relu(z) = 0, prediction 0, residual -3
    g = module_gradient(request(spec, params, [[[seqs]]]), seqs, [Q(1)])
    assert g == {"fc1.weight": [[0.0]], "fc1.bias": [[0.0]], "fc2.weight": [[0.0]], "fc2.bias": [[-3.0]]}


def test_the_tied_embedding_is_used_twice():
    from accumcheck_adapter import ModelSpec
    spec = ModelSpec("tied_embedding", vocab_size=2, embed_size=1, frozen=("bias",))
    params = {"embedding": [[1], [2]], "bias": [[0], [0]]}
    seqs = [seq([[]], [[0, 0]], token_ids=[1])]
    # prediction E E[1] = (2, 4); r = (2, 4); output use: r_v E[1] = (4, 8); input use: E^T r = 10 into row 1
    g = module_gradient(request(spec, params, [[[seqs]]]), seqs, [Q(1)])
    assert g == {"embedding": [[4.0], [18.0]], "bias": None}


def test_parameters_keep_the_spec_names_order_and_shapes():
    from accumcheck_adapter import ModelSpec
    for spec in (ModelSpec("linear", 3, 2, expert_count=2), ModelSpec("mlp", 3, 2, hidden_size=4),
                 ModelSpec("tied_embedding", vocab_size=5, embed_size=2, frozen=("embedding",))):
        params = {n: [[0.0] * c for _ in range(rows)]
                  for n, (rows, c) in zip(spec.parameter_names(), spec.parameter_shapes(), strict=True)}
        model = build_model(spec, params, torch.float32)
        assert [(n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in model.named_parameters()] == [
            (n, shape, torch.float32, not spec.is_frozen(n))
            for n, shape in zip(spec.parameter_names(), spec.parameter_shapes(), strict=True)]
