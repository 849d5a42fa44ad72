"""One rank's run of a request under torch.nn.parallel.DistributedDataParallel (the torch-ddp adapter).

Method, per window s, on every rank r of the group, each on its own sequences steps[s][k][r]:

    zero grads (set to None)
    micro-batches k < last:  with ddp.no_sync(): forward through DDP, backward   (local accumulation only)
    micro-batch last:        forward through DDP, backward                       (DDP all-reduces, once)
    clip_grad_norm_; optimizer.step() (torch.optim, or ZeroRedundancyOptimizer for ZeRO-1); zero grads

The loss of rank r in micro-batch k is sum_i W c_i sum_t M_it l_t, with c_i the window-global coefficients
(counts over every micro-batch of every rank, which every rank reads off the request) and W the world size:
DDP averages, (1/W) sum_r g_r, so the W cancels and the applied gradient is that of the window objective.

Present and absent gradients, with find_unused_parameters=True (torch 2.6.0, checked by
adapters/python/tests/test_ddp_adapter.py): DDP records which parameters took part in a backward since the
last synchronised one, no_sync micro-batches included, and all-reduces that record with the gradients. A
parameter that some rank used in some micro-batch of the window gets the averaged gradient on every rank
(also on a rank where it took no part: its .grad goes from None to the average); one that no rank used keeps
.grad None. That is the oracle's rule, so routed experts are declared. One DDP requirement is met by us: the
synchronised backward must run on every rank, and DDP starts its all-reduce only when an autograd hook fires.
A rank whose last micro-batch reaches no trainable parameter (routed experts, no token there) adds
0 * sum(p) for a parameter p that some rank used in the window, so p's gradient gains exact zeros and its
presence is unchanged. When no rank used a trainable parameter in the whole window, every rank (deciding from
the request, so all alike) skips the synchronisation: there is nothing to reduce and every .grad stays None.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import torch
import torch.distributed as dist
from accumcheck_adapter import Unsupported, window_coefficients
from accumcheck_adapter.capabilities import Capabilities, Limits, Reports
from accumcheck_adapter.loop import MicroBatch, TorchLoop, optimizer_class_and_options
from accumcheck_adapter.models import SyntheticModel, token_weights
from accumcheck_adapter.result import OptimizerStateReport, Result, optimizer_state_report, parameter_report
from accumcheck_adapter.scenario import AGGREGATIONS, MODEL_KINDS, OPTIMIZERS, ModelSpec, RunRequest, Sequence, Window
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

WORLD_SIZE_MAX = 2  # rank 0 and the one worker process (ddp_ranks.py)


def used_parameters(spec: ModelSpec, sequences: Iterable[Sequence]) -> set[str]:
    """The trainable parameters a forward over `sequences` takes part in (protocol section 5): every one of
    a dense model (its layers run even on no token), the routed experts that some token reaches."""
    if spec.has_experts:
        names = {f"expert{e}.{p}" for seq in sequences for e in seq.expert_index for p in ("weight", "bias")}
    else:
        names = set(spec.parameter_names())
    return {name for name in names if not spec.is_frozen(name)}


class AnchoredModel(nn.Module):
    """What DDP wraps: the synthetic model's per-token losses, and 0 * sum(anchor) when an anchor is named.
    The zero leaves through DDP's forward output, so DDP's graph search sees the anchor as used (a parameter
    touched outside the wrapped forward would be marked ready twice)."""

    def __init__(self, model: SyntheticModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, sequences: list[Sequence], anchor: str | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        losses = self.model(sequences)
        return losses, None if anchor is None else 0 * self.model.get_parameter(anchor).sum()


class _StateByParameter:
    """optimizer.state's shape ({parameter: state}) over a consolidated ZeroRedundancyOptimizer state_dict,
    which keys by the parameter's index in the constructor's list; for optimizer_state_report."""

    def __init__(self, parameters: list[nn.Parameter], state: dict[int, dict[str, Any]]) -> None:
        self.state = {p: state.get(i, {}) for i, p in enumerate(parameters)}


class DdpLoop(TorchLoop):
    """One rank of a DDP run. `group` is the process group of the scenario's ranks (the whole world, or rank 0
    alone for a one-rank scenario); `rank` is this process's rank in it. Hooks as TorchLoop's, plus
    rank_coefficients."""

    CAPABILITIES = Capabilities(
        models=MODEL_KINDS, experts=True, frozen_parameters=True, aggregations=AGGREGATIONS,
        optimizers=OPTIMIZERS, momentum=True, weight_decay=True, clipping=True, world_sizes=(1, WORLD_SIZE_MAX),
        zero_stages=(0, 1), offload=(False,), dtypes=("fp32", "fp64"), precisions=("full",), loss_scaling=False,
        boundary=("automatic", "manual"), step_after_every_backward=(True, False), uneven_windows=True,
        checkpoint=True, reports=Reports(), missing_gradient_is_zero=False,
        limits=Limits(rank_count_max=WORLD_SIZE_MAX))

    def __init__(self, request: RunRequest, *, rank: int, group: dist.ProcessGroup) -> None:
        self.check_runnable(request)
        self.rank = rank
        self.group = group
        self.world_size = dist.get_world_size(group)
        if request.scenario.engine.rank_count != self.world_size:
            raise ValueError(f"engine.rank_count: {request.scenario.engine.rank_count} ranks on a process group "
                             f"of {self.world_size}")
        super().__init__(request)  # the model and the optimizer
        self.ddp = self.wrap(self.model)

    @staticmethod
    def check_runnable(request: RunRequest) -> None:
        """What DDP itself refuses, checked by rank 0 before the request reaches rank 1: DistributedDataParallel
        raises on a module without a trainable parameter."""
        spec = request.scenario.model
        if all(spec.is_frozen(name) for name in spec.parameter_names()):
            raise Unsupported("every parameter is frozen: DistributedDataParallel refuses a module with nothing "
                              "to train")

    # ------------------------------------------------------------------------------------- construction

    def wrap(self, model: SyntheticModel) -> DistributedDataParallel:
        """DDP with every knob it has pinned; the constructor broadcasts rank 0's parameters (identical here:
        every rank builds the model from the request)."""
        return DistributedDataParallel(
            AnchoredModel(model), device_ids=None, output_device=None, dim=0, broadcast_buffers=False,
            process_group=self.group, bucket_cap_mb=25, find_unused_parameters=True, check_reduction=False,
            gradient_as_bucket_view=False, static_graph=False)

    def build_optimizer(self, model: SyntheticModel) -> torch.optim.Optimizer:
        """ZeRO stage 0: torch.optim on every rank. Stage 1: ZeroRedundancyOptimizer around the same torch.optim
        class and options; it partitions the parameters over the ranks (largest first, each to the least
        loaded rank), each rank's step updates its own partition with its own optimizer state, then every
        partition is broadcast from its owner."""
        if self.scenario.engine.zero_stage == 0:
            return super().build_optimizer(model)
        optimizer_class, options = optimizer_class_and_options(self.scenario.optimizer)
        return ZeroRedundancyOptimizer(list(model.parameters()), optimizer_class=optimizer_class,
                                       process_group=self.group, parameters_as_bucket_view=False,
                                       overlap_with_ddp=False, **options)

    # -------------------------------------------------------------------------------------------- hooks

    def rank_coefficients(self, window: Window) -> list[list[Fraction]]:
        """c_i of this rank's sequences, [k][i]: window-global counts, times the world size (DDP averages)."""
        return [[c * self.world_size for c in ranks[self.rank]]
                for ranks in window_coefficients(self.scenario.aggregation, window)]

    def micro_batch_loss(self, batch: MicroBatch, anchor: str | None = None) -> torch.Tensor:
        """sum_i c_i sum_t M_it l_t over this rank's micro-batch, through DDP's forward."""
        losses, zero = self.ddp(batch.sequences, anchor)
        loss = (losses * token_weights(batch.sequences, batch.coefficients, self.dtype)).sum()
        return loss if zero is None else loss + zero

    # ------------------------------------------------------------------------------------------ the run

    def synchronised_backward(self, batch: MicroBatch, anchor: str) -> None:
        """The window's last micro-batch: a backward outside no_sync, on every rank, which DDP all-reduces."""
        self.before_backward(batch)
        reaches = bool(used_parameters(self.scenario.model, batch.sequences))
        loss = self.micro_batch_loss(batch, None if reaches else anchor)
        if not loss.requires_grad:
            raise RuntimeError(f"step {batch.step}: rank {self.rank}'s last micro-batch has no graph although "
                               f"used_parameters said it reaches a trainable parameter; DDP would wait forever")
        loss.backward()
        self.after_backward(batch)

    def full_optimizer_state_dict(self) -> dict[str, Any] | None:
        """The optimizer's whole state_dict on rank 0 (None elsewhere for ZeRO): ZeroRedundancyOptimizer
        first gathers every rank's partition onto rank 0 (consolidate_state_dict, a collective)."""
        if not isinstance(self.optimizer, ZeroRedundancyOptimizer):
            return self.optimizer.state_dict()
        self.optimizer.consolidate_state_dict(to=0)
        return self.optimizer.state_dict() if self.rank == 0 else None

    def checkpoint(self) -> None:
        """Rank 0 writes the checkpoint (model, whole optimizer state, loop state) with torch.save; every rank
        reads those bytes into a fresh model, DDP wrapper and optimizer. ZeroRedundancyOptimizer's
        load_state_dict keeps the part of the state that belongs to this rank's partition."""
        optimizer_state = self.full_optimizer_state_dict()
        blob: list[bytes | None] = [None]
        if self.rank == 0:
            buffer = io.BytesIO()
            torch.save({"model": self.model.state_dict(), "optimizer": optimizer_state,
                        "step_counts": dict(self.step_counts)}, buffer)
            blob = [buffer.getvalue()]
        dist.broadcast_object_list(blob, src=0, group=self.group)  # global rank 0 is rank 0 of every group
        assert blob[0] is not None
        state = torch.load(io.BytesIO(blob[0]), weights_only=True)
        self.model = self.build_model()
        self.model.load_state_dict(state["model"])
        self.ddp = self.wrap(self.model)
        self.optimizer = self.build_optimizer(self.model)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_counts = dict(state["step_counts"])

    def optimizer_state(self) -> OptimizerStateReport | None:
        """The whole optimizer state by parameter name (None on other ranks than 0 under ZeRO)."""
        named = list(self.model.named_parameters())
        if not isinstance(self.optimizer, ZeroRedundancyOptimizer):
            return optimizer_state_report(named, self.optimizer, self.step_counts)
        state = self.full_optimizer_state_dict()
        if state is None:
            return None
        view = _StateByParameter([p for _, p in named], state["state"])
        return optimizer_state_report(named, view, self.step_counts)

    def run(self) -> Result:
        spec = self.scenario.model
        order = spec.parameter_names()
        reports = []
        for s, window in enumerate(self.scenario.steps):
            coefficients = self.rank_coefficients(window)
            used = set().union(*(used_parameters(spec, seqs) for ranks in window for seqs in ranks))
            anchor = min(used, key=order.index) if used else None
            self.optimizer.zero_grad(set_to_none=True)
            last = len(window) - 1
            for k, ranks in enumerate(window):
                batch = MicroBatch(s, k, len(window), self.rank, ranks[self.rank], coefficients[k])
                if k < last or anchor is None:
                    with self.ddp.no_sync():
                        self.backward(batch)
                else:
                    self.synchronised_backward(batch, anchor)
            reports.append(self.step(s))
            if self.scenario.checkpoint_after_step == s:
                self.checkpoint()
        return Result(reports, parameter_report(self.model.named_parameters()), self.optimizer_state())
