"""Random scenarios with dyadic data (halves in [-2, 2]) for comparing the torch side with the reference."""

from __future__ import annotations

import random
from fractions import Fraction as Q

from builders import request, seq

from accumcheck_adapter import ModelSpec, RunRequest
from accumcheck_adapter.scenario import AGGREGATIONS, OptimizerSpec


def dyadic(rng: random.Random) -> Q:
    return Q(rng.randint(-4, 4), 2)


def random_spec(rng: random.Random, kind: str) -> ModelSpec:
    if kind == "linear":
        spec = ModelSpec("linear", rng.randint(1, 3), rng.randint(1, 2), expert_count=rng.choice([1, 1, 2, 3]))
    elif kind == "mlp":
        spec = ModelSpec("mlp", rng.randint(1, 3), rng.randint(1, 2), hidden_size=rng.randint(1, 3))
    else:
        spec = ModelSpec("tied_embedding", vocab_size=rng.randint(2, 4), embed_size=rng.randint(1, 3))
    frozen = tuple(n for n in spec.parameter_names() if rng.random() < 0.2)
    return ModelSpec(spec.kind, spec.input_size, spec.output_size, spec.hidden_size, spec.vocab_size,
                     spec.embed_size, spec.expert_count, frozen)


def random_sequence(rng: random.Random, spec: ModelSpec):
    T = rng.choice([0, 1, 1, 2, 3])
    mask = [1] * T if rng.random() < 0.6 else [rng.randint(0, 1) for _ in range(T)]
    features = [[dyadic(rng) for _ in range(spec.feature_size)] for _ in range(T)]
    targets = [[dyadic(rng) for _ in range(spec.target_size)] for _ in range(T)]
    ids = [rng.randrange(spec.vocab_size) for _ in range(T)] if spec.kind == "tied_embedding" else []
    experts = [rng.randrange(spec.expert_count) for _ in range(T)] if spec.has_experts else []
    return seq(features, targets, mask, ids, experts)


def random_request(rng: random.Random, kind: str, *, steps: int = 1, optimizer: OptimizerSpec | None = None,
                   mode: str | None = None, max_grad_norm: object = None, checkpoint_after_step: int | None = None,
                   dtype: str = "fp64") -> RunRequest:
    spec = random_spec(rng, kind)
    params = {n: [[dyadic(rng) for _ in range(c)] for _ in range(r)]
              for n, (r, c) in zip(spec.parameter_names(), spec.parameter_shapes(), strict=True)}
    windows = [[[[random_sequence(rng, spec) for _ in range(rng.randint(0, 3))]] for _ in range(rng.randint(1, 3))]
               for _ in range(steps)]
    return request(spec, params, windows, dtype=dtype, aggregation=mode or rng.choice(AGGREGATIONS),
                   norm_constant=rng.choice([1, 2, 4, 3]), optimizer=optimizer, max_grad_norm=max_grad_norm,
                   checkpoint_after_step=checkpoint_after_step)


def is_dyadic(q: Q) -> bool:
    return q.denominator & (q.denominator - 1) == 0
