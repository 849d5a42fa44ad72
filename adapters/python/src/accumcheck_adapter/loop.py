"""The correct accumulation loop in plain PyTorch, with small hooks to override (docs/adapter-protocol.md
section 3, "What a correct adapter computes"):

  for each window s:
      zero grads (set to None)
      for each micro-batch k, each rank r:
          before_backward(batch); micro_batch_loss(batch).backward(); after_backward(batch)
      grad_norm, clip_coefficient = before_step(s)      # clip_grad_norm_ once per window
      optimizer.step(); optimizer.zero_grad(set_to_none=True)
      after step checkpoint_after_step: state_dict -> torch.save -> fresh model and optimizer -> load

micro_batch_loss is sum_t c_i M_it l_t with the window-global coefficients c_i of aggregation.py, so the
window's backward calls sum, through autograd's accumulation into .grad, to the gradient of the window
objective. Ranks are walked in one process (the sum over ranks of the window-global objective is what DDP's
averaged gradient equals when each rank's loss is scaled by the world size); the shipped adapter declares one.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import torch

from accumcheck_adapter.aggregation import window_coefficients
from accumcheck_adapter.capabilities import Capabilities, Limits, Reports
from accumcheck_adapter.errors import Unsupported
from accumcheck_adapter.models import SyntheticModel, build_model, token_weights, torch_dtype
from accumcheck_adapter.protocol import Adapter
from accumcheck_adapter.result import (
    Result,
    StepReport,
    gradient_report,
    optimizer_state_report,
    parameter_report,
)
from accumcheck_adapter.scenario import AGGREGATIONS, MODEL_KINDS, OPTIMIZERS, OptimizerSpec, RunRequest, Sequence

CLIP_EPSILON = 1e-6  # torch.nn.utils.clip_grad_norm_'s, and models/clipping.h's


def deterministic_torch() -> None:
    """One intra-op thread and deterministic kernels: a reduction split over threads adds in an order that
    depends on the thread count, and a replay must be bit for bit; the fuzzer runs several adapters at once
    on few cores anyway. use_deterministic_algorithms makes any op without a deterministic kernel raise
    instead of silently varying."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def optimizer_class_and_options(spec: OptimizerSpec) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The torch.optim class of `spec` and its keyword arguments, single-tensor implementation with every knob
    pinned (foreach, fused, maximize, ...): what build_optimizer constructs, and what a wrapper that builds
    the optimizer itself (torch.distributed.optim.ZeroRedundancyOptimizer) is given."""
    common = {"lr": float(spec.lr), "weight_decay": float(spec.weight_decay), "maximize": False,
              "foreach": False, "differentiable": False, "fused": False}
    if spec.kind == "sgd":
        return torch.optim.SGD, {"momentum": float(spec.momentum), "dampening": float(spec.dampening),
                                 "nesterov": spec.nesterov, **common}
    adam = {"betas": (float(spec.beta1), float(spec.beta2)), "eps": float(spec.eps), "amsgrad": False,
            "capturable": False, **common}
    if spec.kind == "adam":
        return torch.optim.Adam, adam
    if spec.kind == "adamw":
        return torch.optim.AdamW, adam
    raise ValueError(f"optimizer.kind: {spec.kind!r} is not sgd, adam or adamw")


def build_optimizer(spec: OptimizerSpec, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """torch.optim's single-tensor implementation with every knob pinned (optimizer_class_and_options)."""
    optimizer_class, options = optimizer_class_and_options(spec)
    return optimizer_class(parameters, **options)


@dataclass(frozen=True)
class MicroBatch:
    """What one backward call sees: window `step`, micro-batch `index` of `count`, `rank`, its sequences
    and their window-global coefficients c_i (exact)."""

    step: int
    index: int
    count: int
    rank: int
    sequences: list[Sequence]
    coefficients: list[Fraction]


class TorchLoop:
    """One run of a request. Subclass and override a hook to change one thing about the loop."""

    CAPABILITIES: ClassVar[Capabilities] = Capabilities(
        models=MODEL_KINDS, experts=True, frozen_parameters=True, aggregations=AGGREGATIONS,
        optimizers=OPTIMIZERS, momentum=True, weight_decay=True, clipping=True, world_sizes=(1,),
        zero_stages=(0,), offload=(False,), dtypes=("fp32", "fp64"), precisions=("full",), loss_scaling=False,
        boundary=("automatic", "manual"), step_after_every_backward=(True, False), uneven_windows=True,
        checkpoint=True, reports=Reports(), missing_gradient_is_zero=False, limits=Limits())

    def __init__(self, request: RunRequest) -> None:
        if request.dtype not in ("fp32", "fp64"):
            raise Unsupported(f"dtype {request.dtype!r}: a torch loop computes in fp32 or fp64")
        if request.scenario.optimizer.missing_gradient_is_zero:
            raise Unsupported("missing_gradient_is_zero: torch.optim skips a parameter whose .grad is None")
        self.request = request
        self.scenario = request.scenario
        self.dtype = torch_dtype(request.dtype)
        self.model = self.build_model()
        self.optimizer = self.build_optimizer(self.model)
        # torch.optim.SGD keeps no step count: the optimizer steps that found p.grad set, by name.
        self.step_counts = {name: 0 for name in self.scenario.model.parameter_names()}

    # ------------------------------------------------------------------------------------- construction

    def build_model(self) -> SyntheticModel:
        return build_model(self.scenario.model, self.scenario.initial_parameters, self.dtype)

    def build_optimizer(self, model: SyntheticModel) -> torch.optim.Optimizer:
        """Every parameter goes in, frozen ones too (as `optimizer(model.parameters())`): they never have a
        gradient, and torch.optim skips a parameter whose .grad is None."""
        return build_optimizer(self.scenario.optimizer, list(model.parameters()))

    # -------------------------------------------------------------------------------------------- hooks

    def micro_batch_loss(self, batch: MicroBatch) -> torch.Tensor:
        """sum_i c_i sum_t M_it l_t over the micro-batch, with window-global c_i."""
        losses = self.model(batch.sequences)
        return (losses * token_weights(batch.sequences, batch.coefficients, self.dtype)).sum()

    def before_backward(self, batch: MicroBatch) -> None:
        """Called before each micro-batch's forward and backward."""

    def after_backward(self, batch: MicroBatch) -> None:
        """Called after each micro-batch's backward."""

    def before_step(self, step: int) -> tuple[float, float]:
        """Clips once per window; returns (grad_norm before clipping, clip coefficient applied)."""
        parameters = list(self.model.parameters())
        max_norm = self.scenario.max_grad_norm
        if max_norm is None:
            return float(total_norm(parameters)), 1.0
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm=float(max_norm), foreach=False)
        return float(norm), clip_coefficient(norm, float(max_norm))

    # ------------------------------------------------------------------------------------------ the run

    def backward(self, batch: MicroBatch) -> None:
        self.before_backward(batch)
        loss = self.micro_batch_loss(batch)
        if loss.requires_grad:  # no trainable parameter took part (every expert unreached, all frozen)
            loss.backward()
        self.after_backward(batch)

    def step(self, step: int) -> StepReport:
        grad_norm, coefficient = self.before_step(step)
        gradient = gradient_report(self.model.named_parameters())
        for name, p in self.model.named_parameters():
            if p.grad is not None:
                self.step_counts[name] += 1
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepReport(True, gradient, grad_norm, coefficient)

    def checkpoint(self) -> None:
        """Saves model, optimizer and loop state through torch.save, then resumes in fresh objects."""
        buffer = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "step_counts": dict(self.step_counts)}, buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
        self.model = self.build_model()
        self.model.load_state_dict(state["model"])
        self.optimizer = self.build_optimizer(self.model)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_counts = dict(state["step_counts"])

    def run(self) -> Result:
        reports = []
        for s, window in enumerate(self.scenario.steps):
            coefficients = window_coefficients(self.scenario.aggregation, window)
            self.optimizer.zero_grad(set_to_none=True)
            for k, ranks in enumerate(window):
                for r, sequences in enumerate(ranks):
                    self.backward(MicroBatch(s, k, len(window), r, sequences, coefficients[k][r]))
            reports.append(self.step(s))
            if self.scenario.checkpoint_after_step == s:
                self.checkpoint()
        named = list(self.model.named_parameters())
        return Result(reports, parameter_report(named), optimizer_state_report(named, self.optimizer, self.step_counts))


def total_norm(parameters: list[torch.nn.Parameter]) -> torch.Tensor:
    """The global L2 norm of the present gradients, as clip_grad_norm_ computes it (the norm of the
    per-tensor norms; 0 without any gradient)."""
    return torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None], 2.0, foreach=False)


def clip_coefficient(norm: torch.Tensor, max_norm: float) -> float:
    """min(1, max_norm / (norm + 1e-6)), in the norm's dtype, as clip_grad_norm_ computes the factor."""
    return float(torch.clamp(max_norm / (norm + CLIP_EPSILON), max=1.0))


class LoopAdapter(Adapter):
    """An adapter that runs each request with a TorchLoop (sub)class."""

    def __init__(self, loop: type[TorchLoop] = TorchLoop, *, name: str, version: str = "1.0",
                 description: str = "", capabilities: Capabilities | None = None) -> None:
        self.loop = loop
        self.name = name
        self.version = version
        self.description = description
        self._capabilities = capabilities or loop.CAPABILITIES

    def capabilities(self) -> Capabilities:
        return self._capabilities

    def run(self, request: RunRequest) -> Result:
        return self.loop(request).run()
