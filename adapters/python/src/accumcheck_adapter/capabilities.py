"""What an adapter can run (docs/adapter-protocol.md section 2): every field required, checked on creation,
and a `check` that raises Unsupported for a request outside them (with the capability named)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from accumcheck_adapter.errors import Unsupported
from accumcheck_adapter.scenario import (
    AGGREGATIONS,
    BOUNDARIES,
    DTYPES,
    MODEL_KINDS,
    OPTIMIZERS,
    PRECISIONS,
    RunRequest,
)


@dataclass(frozen=True)
class Reports:
    """What a result can carry (section 6)."""

    applied_gradient: bool = True
    grad_norm: bool = True
    clip_coefficient: bool = True
    optimizer_state: bool = True


@dataclass(frozen=True)
class Limits:
    """The largest scenario the adapter accepts. The kit reads them as: ranks; windows (optimizer steps);
    micro-batches in one window; tokens in the whole scenario (every window, micro-batch, rank)."""

    rank_count_max: int = 1
    step_count_max: int = 16
    micro_batch_count_max: int = 16
    token_count_max: int = 1024


@dataclass(frozen=True)
class Capabilities:
    models: tuple[str, ...]
    experts: bool
    frozen_parameters: bool
    aggregations: tuple[str, ...]
    optimizers: tuple[str, ...]
    momentum: bool
    weight_decay: bool
    clipping: bool
    world_sizes: tuple[int, ...]
    zero_stages: tuple[int, ...]
    offload: tuple[bool, ...]
    dtypes: tuple[str, ...]
    precisions: tuple[str, ...]
    loss_scaling: bool
    boundary: tuple[str, ...]
    step_after_every_backward: tuple[bool, ...]
    uneven_windows: bool
    checkpoint: bool
    reports: Reports
    missing_gradient_is_zero: bool
    limits: Limits

    def __post_init__(self) -> None:
        names = {"models": MODEL_KINDS, "aggregations": AGGREGATIONS, "optimizers": OPTIMIZERS,
                 "dtypes": DTYPES, "precisions": PRECISIONS, "boundary": BOUNDARIES}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):  # accept lists, store tuples
                object.__setattr__(self, f.name, value := tuple(value))
            if isinstance(value, tuple):
                if not value:
                    raise ValueError(f"capabilities.{f.name}: must not be empty")
                for v in value:
                    if f.name in names and v not in names[f.name]:
                        raise ValueError(f"capabilities.{f.name}: {v!r} is not one of {', '.join(names[f.name])}")
        for key in ("offload", "step_after_every_backward"):
            if any(not isinstance(v, bool) for v in getattr(self, key)):
                raise ValueError(f"capabilities.{key}: expected a list of true/false, got {list(getattr(self, key))}")
        for w in self.world_sizes:
            if isinstance(w, bool) or not isinstance(w, int) or w < 1:
                raise ValueError(f"capabilities.world_sizes: {w!r} is not an integer >= 1")
        for z in self.zero_stages:
            if z not in (0, 1, 2, 3) or isinstance(z, bool):
                raise ValueError(f"capabilities.zero_stages: {z!r} is not 0, 1, 2 or 3")
        for key, value in asdict(self.limits).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"capabilities.limits.{key}: {value!r} is not an integer >= 1")

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
        out["reports"] = asdict(self.reports)
        out["limits"] = asdict(self.limits)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Capabilities:
        missing = [f.name for f in fields(cls) if f.name not in obj]
        if missing:
            raise ValueError(f"capabilities.{missing[0]}: missing")
        values = {f.name: obj[f.name] for f in fields(cls)}
        values["reports"] = Reports(**obj["reports"])
        values["limits"] = Limits(**obj["limits"])
        return cls(**values)

    def check(self, request: RunRequest) -> None:
        """Raises Unsupported naming the first capability the request needs and this adapter lacks."""
        s, e, m, o = request.scenario, request.scenario.engine, request.scenario.model, request.scenario.optimizer

        def need(ok: bool, what: str) -> None:
            if not ok:
                raise Unsupported(what)

        need(request.dtype in self.dtypes,
             f"dtype {request.dtype!r} is not in the adapter's dtypes {list(self.dtypes)}")
        need(m.kind in self.models, f"model {m.kind!r} is not in the adapter's models {list(self.models)}")
        need(self.experts or not m.has_experts, f"{m.expert_count} routed experts: the adapter has experts false")
        need(self.frozen_parameters or not m.frozen, "frozen parameters: the adapter has frozen_parameters false")
        need(s.aggregation.mode in self.aggregations,
             f"aggregation {s.aggregation.mode!r} is not in the adapter's aggregations {list(self.aggregations)}")
        need(o.kind in self.optimizers,
             f"optimizer {o.kind!r} is not in the adapter's optimizers {list(self.optimizers)}")
        need(self.momentum or (o.momentum == 0 and not o.nesterov), "SGD momentum: the adapter has momentum false")
        need(self.weight_decay or o.weight_decay == 0, "weight decay: the adapter has weight_decay false")
        need(self.clipping or s.max_grad_norm is None, "clipping (max_grad_norm): the adapter has clipping false")
        need(e.rank_count in self.world_sizes,
             f"{e.rank_count} ranks: the adapter's world_sizes are {list(self.world_sizes)}")
        need(e.zero_stage in self.zero_stages,
             f"ZeRO stage {e.zero_stage}: the adapter's zero_stages are {list(self.zero_stages)}")
        need(e.offload in self.offload, f"offload {e.offload}: the adapter's offload is {list(self.offload)}")
        need(e.precision in self.precisions,
             f"precision {e.precision!r} is not in the adapter's precisions {list(self.precisions)}")
        need(self.loss_scaling or e.loss_scaler is None, "loss scaling: the adapter has loss_scaling false")
        need(e.boundary in self.boundary, f"boundary {e.boundary!r}: the adapter's boundary is {list(self.boundary)}")
        need(e.step_after_every_backward in self.step_after_every_backward,
             f"step_after_every_backward {e.step_after_every_backward}: not in the adapter's "
             f"{list(self.step_after_every_backward)}")
        need(self.uneven_windows or all(len(w) == e.accumulation_steps for w in s.steps),
             "a window with other than G micro-batches: the adapter has uneven_windows false")
        need(self.checkpoint or s.checkpoint_after_step is None, "checkpoint: the adapter has checkpoint false")
        # optimizer.missing_gradient_is_zero is the oracle's business (accumcheck sets it from the adapter's
        # capability when it compares); the scenario's own value says nothing about what the adapter must do.
        lim = self.limits
        need(e.rank_count <= lim.rank_count_max,
             f"{e.rank_count} ranks exceed limits.rank_count_max {lim.rank_count_max}")
        need(len(s.steps) <= lim.step_count_max,
             f"{len(s.steps)} steps exceed limits.step_count_max {lim.step_count_max}")
        need(all(len(w) <= lim.micro_batch_count_max for w in s.steps),
             f"a window exceeds limits.micro_batch_count_max {lim.micro_batch_count_max}")
        need(s.token_count <= lim.token_count_max,
             f"{s.token_count} tokens exceed limits.token_count_max {lim.token_count_max}")
