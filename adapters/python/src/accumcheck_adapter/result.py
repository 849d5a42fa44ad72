"""The result message (docs/adapter-protocol.md section 6), and how it is read off torch objects.

The torch helpers take modules, parameters and optimizers duck-typed (`.grad`, `.state`, `.tolist()`), so
this module imports without torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accumcheck_adapter.errors import ProtocolError
from accumcheck_adapter.exact import Number, encode_number, parse_number

Tensor = list[list[Number]]


def _encode_tensor(t: Tensor | None) -> list[list[float | str]] | None:
    return None if t is None else [[encode_number(x) for x in row] for row in t]


def _decode_tensor(value: object, path: str) -> Tensor | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ProtocolError(path, "expected an array of rows or null")
    return [[parse_number(x, f"{path}[{r}][{c}]") for c, x in enumerate(row)] for r, row in enumerate(value)]


def _decode_tensors(value: object, path: str) -> dict[str, Tensor | None]:
    if not isinstance(value, dict):
        raise ProtocolError(path, "expected an object keyed by parameter name")
    return {name: _decode_tensor(t, f"{path}.{name}") for name, t in value.items()}


@dataclass
class StepReport:
    """One window: whether the optimizer applied an update, the gradient it consumed (by name, None for a
    parameter without one; the whole field None when not reported), the reported norm and clip factor."""

    applied: bool
    gradient: dict[str, Tensor | None] | None = None
    grad_norm: Number | None = None
    clip_coefficient: Number | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "gradient": None if self.gradient is None
            else {n: _encode_tensor(t) for n, t in self.gradient.items()},
            "grad_norm": None if self.grad_norm is None else encode_number(self.grad_norm),
            "clip_coefficient": None if self.clip_coefficient is None else encode_number(self.clip_coefficient),
        }

    @classmethod
    def from_json(cls, obj: object, path: str) -> StepReport:
        if not isinstance(obj, dict) or not isinstance(obj.get("applied"), bool):
            raise ProtocolError(f"{path}.applied", "expected true or false")
        gradient = obj.get("gradient")
        return cls(obj["applied"], None if gradient is None else _decode_tensors(gradient, f"{path}.gradient"),
                   None if obj.get("grad_norm") is None else parse_number(obj["grad_norm"], f"{path}.grad_norm"),
                   None if obj.get("clip_coefficient") is None
                   else parse_number(obj["clip_coefficient"], f"{path}.clip_coefficient"))


@dataclass
class OptimizerStateReport:
    """Per parameter: first_moment (SGD momentum_buffer, Adam exp_avg), second_moment (exp_avg_sq), None where
    the optimizer holds none, and step_count (state["step"], 0 where never stepped)."""

    first_moment: dict[str, Tensor | None] = field(default_factory=dict)
    second_moment: dict[str, Tensor | None] = field(default_factory=dict)
    step_count: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"first_moment": {n: _encode_tensor(t) for n, t in self.first_moment.items()},
                "second_moment": {n: _encode_tensor(t) for n, t in self.second_moment.items()},
                "step_count": dict(self.step_count)}

    @classmethod
    def from_json(cls, obj: object, path: str) -> OptimizerStateReport:
        if not isinstance(obj, dict):
            raise ProtocolError(path, "expected an object or null")
        counts = obj.get("step_count")
        if not isinstance(counts, dict) or not all(isinstance(c, int) and not isinstance(c, bool)
                                                   for c in counts.values()):
            raise ProtocolError(f"{path}.step_count", "expected an object of integers")
        return cls(_decode_tensors(obj.get("first_moment"), f"{path}.first_moment"),
                   _decode_tensors(obj.get("second_moment"), f"{path}.second_moment"), dict(counts))


@dataclass
class Result:
    """A run's result: one StepReport per window, the final parameters, the optimizer state (or None)."""

    steps: list[StepReport]
    parameters: dict[str, Tensor]
    optimizer_state: OptimizerStateReport | None = None

    def to_json(self, request_id: int) -> dict[str, Any]:
        return {"type": "result", "id": request_id, "steps": [s.to_json() for s in self.steps],
                "parameters": {n: _encode_tensor(t) for n, t in self.parameters.items()},
                "optimizer_state": None if self.optimizer_state is None else self.optimizer_state.to_json()}

    @classmethod
    def from_json(cls, msg: object) -> Result:
        if not isinstance(msg, dict) or msg.get("type") != "result":
            raise ProtocolError("type", "expected a result")
        steps = msg.get("steps")
        if not isinstance(steps, list):
            raise ProtocolError("steps", "expected an array with one entry per window")
        parameters = _decode_tensors(msg.get("parameters"), "parameters")
        for name, t in parameters.items():
            if t is None:
                raise ProtocolError(f"parameters.{name}", "a parameter cannot be null")
        state = msg.get("optimizer_state")
        return cls([StepReport.from_json(s, f"steps[{i}]") for i, s in enumerate(steps)],
                   {n: t for n, t in parameters.items() if t is not None},
                   None if state is None else OptimizerStateReport.from_json(state, "optimizer_state"))


# ------------------------------------------------------------------------------- reading torch objects


def tensor_report(t: Any) -> Tensor:
    """A 2-D tensor as rows of Python floats (a float32 widens exactly)."""
    return t.detach().cpu().tolist()


def gradient_report(named_parameters: Iterable[tuple[str, Any]]) -> dict[str, Tensor | None]:
    """`.grad` of each parameter by name, None where autograd gave none."""
    return {name: None if p.grad is None else tensor_report(p.grad) for name, p in named_parameters}


def parameter_report(named_parameters: Iterable[tuple[str, Any]]) -> dict[str, Tensor]:
    return {name: tensor_report(p) for name, p in named_parameters}


def optimizer_state_report(named_parameters: Iterable[tuple[str, Any]], optimizer: Any,
                           step_counts: Mapping[str, int] | None = None) -> OptimizerStateReport:
    """torch.optim state by parameter name: SGD momentum_buffer -> first_moment, Adam/AdamW exp_avg and
    exp_avg_sq -> first/second_moment, state["step"] -> step_count. torch.optim.SGD keeps no step count:
    `step_counts` (the optimizer steps that found p.grad set, counted by the loop) fills it in."""
    report = OptimizerStateReport()
    for name, p in named_parameters:
        state = optimizer.state.get(p, {})
        first = state.get("momentum_buffer", state.get("exp_avg"))
        second = state.get("exp_avg_sq")
        report.first_moment[name] = None if first is None else tensor_report(first)
        report.second_moment[name] = None if second is None else tensor_report(second)
        step = state.get("step")
        if step is not None:
            report.step_count[name] = int(step.item() if hasattr(step, "item") else step)
        else:
            report.step_count[name] = int((step_counts or {}).get(name, 0))
    return report
