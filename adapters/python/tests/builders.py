"""Building run requests in tests: exact values in, a validated RunRequest (and its JSON) out."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from accumcheck_adapter import ModelSpec, RunRequest, Scenario, Sequence, engine_calls
from accumcheck_adapter.scenario import Aggregation, EngineConfig, OptimizerSpec

Q = Fraction


def seq(features: list[list[Any]], targets: list[list[Any]], mask: list[int] | None = None,
        token_ids: list[int] | None = None, expert_index: list[int] | None = None) -> Sequence:
    exact_f = [[Q(x) for x in row] for row in features]
    exact_t = [[Q(x) for x in row] for row in targets]
    return Sequence(list(mask if mask is not None else [1] * len(targets)), [[float(x) for x in r] for r in exact_f],
                    [[float(x) for x in r] for r in exact_t], list(token_ids or []), list(expert_index or []),
                    exact_f, exact_t)


def request(model: ModelSpec, params: dict[str, list[list[Any]]], steps: list[list[list[list[Sequence]]]], *,
            dtype: str = "fp64", aggregation: str = "sum", norm_constant: Any = 1,
            optimizer: OptimizerSpec | None = None, max_grad_norm: Any = None, boundary: str = "manual",
            step_after_every_backward: bool = False, accumulation_steps: int | None = None,
            checkpoint_after_step: int | None = None, request_id: int = 7) -> RunRequest:
    """A validated request; decoding its own JSON checks the whole encode/decode path on the way."""
    exact = {n: [[Q(x) for x in row] for row in m] for n, m in params.items()}
    g = accumulation_steps if accumulation_steps is not None else (len(steps[0]) if steps else 1)
    scenario = Scenario(
        model, Aggregation(aggregation, Q(norm_constant)), optimizer or OptimizerSpec("sgd", lr=Q(1, 4)),
        None if max_grad_norm is None else Q(max_grad_norm),
        EngineConfig(rank_count=len(steps[0][0]) if steps and steps[0] else 1, accumulation_steps=g,
                     boundary=boundary, step_after_every_backward=step_after_every_backward),
        {n: [[float(x) for x in r] for r in m] for n, m in exact.items()}, exact, steps, checkpoint_after_step, 0)
    draft = RunRequest(request_id, dtype, scenario, engine_calls(scenario))
    return RunRequest.from_json(draft.to_json())
