"""One rank of the real-DeepSpeed adapter: a long-lived process that runs run requests through DeepSpeed's engine.

Upstream code that runs (the release of --version, from .venv/deepspeed/X.Y.Z, see release.py):
  deepspeed.init_distributed (gloo on 127.0.0.1), deepspeed.initialize with a torch.optim optimizer and the
  pinned config of ds_config.py, engine.forward, engine.backward, engine.step, engine.set_gradient_accumulation_
  boundary, engine.get_global_grad_norm, engine.save_checkpoint / load_checkpoint; inside them DeepSpeed's own
  1/G loss scaling, ZeRO-1/2 flat partitions, ZeRO-3's partitioned parameters with their fetch / release and
  reduction hooks, CPU-offload copies, clipping and the step of the torch.optim optimizer (torch 2.6.0,
  single-tensor SGD / Adam / AdamW); deepspeed.zero.GatheredParameters for ZeRO-3's final parameters.
Ours: the synthetic models and optimizer construction of the kit (accumcheck_adapter.build_model,
  loop.build_optimizer), the per-micro-batch loss, the walk over the request's engine calls, and the reading of
  what the optimizer consumed.

The loss. DeepSpeed's engine multiplies each micro-batch's loss by 1/G itself (configured G; engine.backward up
to 0.18.2, a hook on engine.forward's output from 0.18.3), and its data-parallel reduction averages over the
W ranks. A correct DeepSpeed user therefore backpropagates, on rank r for micro-batch k,
    loss = G * W * sum_i c_i sum_t M_it l_t
with c_i the window-global coefficients (every micro-batch, every rank) of the aggregation: then a correct
DeepSpeed applies exactly the window objective's gradient. Each c_i * G * W is rounded once to fp32.

The engine calls. `calls` is followed literally (docs/adapter-protocol.md sections 3-4): set_boundary is
engine.set_gradient_accumulation_boundary(value); backward is forward + engine.backward(loss) of this rank's
sequences; step is engine.step(); checkpoint saves with engine.save_checkpoint into the trial's folder, builds a
new model, optimizer and engine, and loads with engine.load_checkpoint.

What is reported, and why it is the applied gradient. A pre-step hook on the torch.optim optimizer
(Optimizer.register_step_pre_hook) copies the .grad of every tensor the optimizer is about to step, at the moment
DeepSpeed calls optimizer.step(): after DeepSpeed's reduction, accumulation, offload copies, unscaling and
clipping. It is therefore exactly what the optimizer consumed, in every stage and with or without offload:
  - ZeRO-0: the model's parameters, read by name.
  - ZeRO-1/2: the fp32 flat partition of this rank (single_partition_of_fp32_groups[i]); the model's parameters
    are views into DeepSpeed's flat buffer (bit16_groups_flat[i]), so each parameter's offset there is read from
    its storage address, the W partitions are gathered (gloo all_gather, same order on every rank) and cut by
    those offsets. A trainable parameter that got no gradient reads what the flat partition held (zeros in a
    correct engine: missing_gradient_is_zero).
  - ZeRO-3: the fp32 flat partition of each optimizer sub-group (fp32_partitioned_groups_flat[i]; DeepSpeed steps
    the optimizer once per sub-group, the hook collects them all). Each parameter is partitioned on its own:
    this rank's slice of it lies at DeepSpeed's grad_position offset (stage3_layout); the W partitions are
    gathered, each parameter's W slices joined and cut to ds_numel.
The grad norm is engine.get_global_grad_norm() after the step (DeepSpeed's ZeRO computes it; ZeRO-0 on fp32 keeps
none, reported null). DeepSpeed keeps no clip coefficient; for ZeRO-1/2 the adapter reports the factor that
DeepSpeed's own rule gives from that norm (Trial.clip_factor), null for ZeRO-0. Optimizer state is read from the
torch.optim state (keyed by the flat partitions for ZeRO-1/2/3, gathered and cut the same way). The parameters
after the last window are the module's; ZeRO-3's are gathered first (Trial.parameters).

Precision bf16 (ZeRO-1 with offload, ZeRO-2, ZeRO-3; ds_config.bf16_section): DeepSpeed casts the fp32 module to
bf16 in initialize, the inputs are built in bf16, the ZeRO optimizer accumulates the bf16 gradients into its fp32
flat partitions (grad_accum_dtype fp32), and what is read is the same fp32 partition as above; the final parameters
of trainable tensors are the fp32 master weights (those partitions), not the module's bf16 copies.

This process is one rank of accumcheck_adapter.ranks: run requests on stdin, replies on the file descriptor
--reply-fd (worker_ranks.serve_rank says which). stdout is DeepSpeed's log and is sent to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import math
import os
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import release
from accumcheck_adapter import ranks as worker_ranks
from reading import (
    FlatEntry,
    bf16_fields,
    canonical_layout,
    check_engine,
    engine_refusal,
    stage3_layout,
    zero12_layout,
    zero_fields,
)

# The adapter's deadline for a collective: a rank whose partner failed must not wait for ever.
COLLECTIVE_TIMEOUT_S = 30


class Trial:
    """One run request on this rank."""

    def __init__(self, ds: Any, request: Any, rank: int, world_size: int, checkpoint_dir: Path | None) -> None:
        import torch
        from accumcheck_adapter.aggregation import window_coefficients

        self.ds, self.torch = ds, torch
        self.request, self.scenario = request, request.scenario
        self.rank, self.world_size = rank, world_size
        self.checkpoint_dir = checkpoint_dir
        e = self.scenario.engine
        if e.rank_count != world_size:
            raise RuntimeError(f"a {e.rank_count}-rank scenario sent to a worker of world size {world_size}")
        self.stage = e.zero_stage
        self.bf16 = e.precision == "bf16"
        self.check_supported()
        self.loss_scale = Fraction(e.accumulation_steps * world_size)
        self.coefficients = [window_coefficients(self.scenario.aggregation, w) for w in self.scenario.steps]
        self.names = self.scenario.model.parameter_names()
        self.trainable = [n for n in self.names if not self.scenario.model.is_frozen(n)]
        self.window: list[dict[str, Any]] = []      # optimizer steps since the last end_window
        self.reports: list[Any] = []
        self.step_counts = {n: 0 for n in self.names}  # SGD keeps none; counted per applied step
        self.engine: Any = None
        self.build_engine()

    # ------------------------------------------------------------------------------------ what can run

    def check_supported(self) -> None:
        from accumcheck_adapter import Unsupported

        s, e, m = self.scenario, self.scenario.engine, self.scenario.model
        refusal = engine_refusal(s)
        if refusal is not None:
            raise Unsupported(refusal)
        if e.precision not in ("full", "bf16"):
            raise Unsupported(f"precision {e.precision!r}: the adapter runs fp32 and bf16 only")
        if e.precision == "bf16" and (e.zero_stage == 0 or (e.zero_stage == 1 and not e.offload)):
            # Measured (docs/deepspeed-adapter.md): ZeRO-0, and ZeRO-1 without offload, are not the ZeRO
            # optimizer in bf16: 0.15 / 0.16 and 0.18.9+ (ZeRO-1) wrap BF16_Optimizer, 0.17.6 FP16_UnfusedOptimizer
            # (its grad norm is the loss-scaled one), 0.18.9+ refuse ZeRO-0 (NotImplementedError). The adapter
            # reads neither wrapper's partitions.
            raise Unsupported(f"precision bf16 with ZeRO stage {e.zero_stage} without offload: DeepSpeed wraps "
                              "BF16_Optimizer / FP16_UnfusedOptimizer (or refuses), not the ZeRO optimizer the "
                              "adapter reads")
        # engine.backward on a loss that no trainable parameter took part in raises in autograd; a DeepSpeed user
        # cannot run such a micro-batch, and one rank raising would leave the other in a collective.
        if (self.world_size > 1 and e.zero_stage in (1, 2) and not e.offload
                and self.ds.__version__ in release.EMPTY_PARTITION_FAILS and self.last_partition_empty()):
            raise Unsupported(release.EMPTY_PARTITION_FAILS[self.ds.__version__])
        for si, window in enumerate(s.steps):
            for k, ranks in enumerate(window):
                for r, seqs in enumerate(ranks):
                    if not micro_batch_reaches_trainable(m, seqs):
                        raise Unsupported(f"micro-batch {k} of window {si} on rank {r} reaches no trainable "
                                          "parameter: engine.backward would raise")
                # ZeRO-1/2 reduce from gradient hooks, which fire only for the parameters that got a gradient: two
                # ranks that reach different experts in one backward enter different collectives and wait for
                # ever (measured on 0.19.8: both ranks hang until killed). ZeRO-3 also all-gathers an expert's
                # parameters only when its module runs: refused too (not measured).
                if e.zero_stage > 0 and len({frozenset(reached_experts(m, seqs)) for seqs in ranks}) > 1:
                    raise Unsupported(f"micro-batch {k} of window {si} routes tokens to different experts on "
                                      "different ranks: DeepSpeed ZeRO-1/2/3 then wait in different collectives")

    def last_partition_empty(self) -> bool:
        """Whether the last rank's ZeRO partition holds only padding: DeepSpeed pads the flat buffer of the N
        trainable elements to a multiple of 2 W (nccl_start_alignment_factor times the ranks) and gives each rank
        an equal share."""
        m = self.scenario.model
        n = sum(r * c for name, (r, c) in zip(m.parameter_names(), m.parameter_shapes(), strict=True)
                if not m.is_frozen(name))
        w = self.world_size
        share = -(-n // (2 * w)) * 2 * w // w
        return n <= (w - 1) * share

    # ------------------------------------------------------------------------------------ the engine

    def build_engine(self) -> None:
        import ds_config
        from accumcheck_adapter import build_model
        from accumcheck_adapter.loop import build_optimizer

        torch, ds = self.torch, self.ds
        model = build_model(self.scenario.model, self.scenario.initial_parameters, torch.float32)
        for p in model.parameters():
            if p.requires_grad:
                p.register_hook(canonical_layout)
        optimizer = build_optimizer(self.scenario.optimizer, list(model.parameters()))
        optimizer.register_step_pre_hook(self.capture)
        config = ds_config.deepspeed_config(self.scenario, self.world_size, zero_fields(ds), bf16_fields(ds))
        engine, _, _, _ = ds.initialize(model=model, optimizer=optimizer, config=config, dist_init_required=False)
        check_engine(engine, ds_config.expected_engine_state(self.scenario))
        if self.bf16:
            # DeepSpeed casts the module's parameters to bf16 in initialize (module.bfloat16() up to 0.18,
            # _cast_module_mixed_precision from 0.19); the kit's model builds its inputs in model.dtype.
            bad = [n for n, p in model.named_parameters() if p.dtype != torch.bfloat16]
            if bad:
                raise RuntimeError(f"precision bf16: parameters {bad} are not bf16 after deepspeed.initialize")
            model.dtype = torch.bfloat16
            if engine.communication_data_type != torch.bfloat16:
                raise RuntimeError(f"engine.communication_data_type is {engine.communication_data_type}, the adapter "
                                   "configured bf16")
            if type(engine.optimizer).__name__ not in ("DeepSpeedZeroOptimizer", "DeepSpeedZeroOptimizer_Stage3"):
                raise RuntimeError(f"precision bf16: DeepSpeed built {type(engine.optimizer).__name__}, not the ZeRO "
                                   "optimizer the adapter reads")
        self.engine, self.model, self.basic_optimizer = engine, model, optimizer
        self.param_names = {id(p): n for n, p in model.named_parameters()}
        self.captured: dict[int, Any] | None = None
        self.layout: list[tuple[Any, list[FlatEntry], int]] = []  # (fp32 partition, entries, partition size)
        if self.stage in (1, 2):
            self.layout = zero12_layout(engine.optimizer, self.param_names, self.world_size)
        elif self.stage == 3:
            self.layout = stage3_layout(engine.optimizer, self.param_names)
            if engine.zero_offload_param() is not None:
                raise RuntimeError(f"engine.zero_offload_param() is {engine.zero_offload_param()!r}, the adapter "
                                   "configured none")
        elif self.stage != 0:
            raise RuntimeError(f"ZeRO stage {self.stage} is not read by this adapter")

    def capture(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Optimizer step pre-hook: the gradient of every tensor the optimizer is about to step."""
        got = {} if self.captured is None else self.captured
        for group in optimizer.param_groups:
            for p in group["params"]:
                got[id(p)] = None if p.grad is None else p.grad.detach().clone()
        self.captured = got

    def gather(self, t: Any) -> Any:
        """The W partitions of a flat tensor, concatenated in rank order."""
        if self.world_size == 1:
            return t
        torch = self.torch
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        torch.distributed.all_gather(parts, t.contiguous())
        return torch.cat(parts)

    def by_name(self, read: Any) -> dict[str, list[list[float]] | None]:
        """A report by parameter name of `read(tensor)` for what the optimizer holds: `read` returns a tensor of
        the stepped tensor's shape or None. Frozen parameters (never stepped) are None."""
        out: dict[str, list[list[float]] | None] = {n: None for n in self.names}
        if self.stage == 0:
            for name, p in self.model.named_parameters():
                value = read(p)
                out[name] = None if value is None else value.detach().reshape(p.shape).tolist()
            return out
        for part, entries, _ in self.layout:
            value = read(part)
            present = self.world_size == 1 or self.all_ranks(value is not None)
            if value is None or not present:
                continue
            full = self.gather(value.detach().float())
            for e in entries:
                out[e.name] = e.cut(full, value.numel(), self.world_size).tolist()
        return out

    def all_ranks(self, flag: bool) -> bool:
        torch = self.torch
        t = torch.tensor([1 if flag else 0])
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
        return bool(t.item())

    # ------------------------------------------------------------------------------------ the calls

    def backward(self, step: int, micro_batch: int) -> None:
        from accumcheck_adapter.models import token_weights

        torch = self.torch
        seqs = self.scenario.steps[step][micro_batch][self.rank]
        coefficients = [c * self.loss_scale for c in self.coefficients[step][micro_batch][self.rank]]
        losses = self.engine(seqs)
        # bf16: the per-token losses are bf16; the weights stay fp32 (type promotion), so each c_i G W is rounded
        # once, to fp32, as in fp32, and the loss DeepSpeed scales and backpropagates is fp32.
        loss = (losses * token_weights(seqs, coefficients, torch.float32)).sum()
        self.engine.backward(loss)

    def step(self) -> None:
        self.captured = None
        self.engine.step()
        if self.captured is None:
            return
        captured, self.captured = self.captured, None
        gradient = self.by_name(lambda t: captured.get(id(t)))
        for name in self.names:
            if name in self.trainable and (self.stage != 0 or gradient[name] is not None):
                self.step_counts[name] += 1
        norm = self.engine.get_global_grad_norm()
        norm = None if norm is None else float(norm)
        self.window.append({"gradient": gradient, "grad_norm": norm, "clip_coefficient": self.clip_factor(norm)})

    def clip_factor(self, norm: float | None) -> float | None:
        """The factor ZeRO-1/2/3 multiplied the gradient by, from its reported norm by its own rule
        (unscale_and_clip_grads of stage_1_and_2.py and of stage3.py, the same in every pinned release, loss
        scale 1):
        clip = (norm + 1e-6) / gradient_clipping, clamped to >= 1, gradient *= 1 / clip. DeepSpeed keeps no
        such number; without it accumcheck could not undo the clipping to compare the norm with the applied
        gradient. None where DeepSpeed reports no norm (ZeRO-0)."""
        mgn = self.scenario.max_grad_norm
        if norm is None or self.stage == 0:
            return None
        if mgn is None or not math.isfinite(norm) or norm < 0:
            return 1.0
        clip = (norm + 1e-6) / float(mgn)
        return 1.0 / clip if clip > 1.0 else 1.0

    def end_window(self, step: int) -> None:
        from accumcheck_adapter import StepReport

        if len(self.window) > 1:
            raise RuntimeError(f"window {step}: the optimizer stepped {len(self.window)} times")
        if not self.window:
            self.reports.append(StepReport(False, {n: None for n in self.names}, 0.0, 1.0))
        else:
            w = self.window[0]
            self.reports.append(StepReport(True, w["gradient"], w["grad_norm"], w["clip_coefficient"]))
        self.window = []

    def checkpoint(self, step: int) -> None:
        if self.checkpoint_dir is None:
            raise RuntimeError("a checkpoint call but the worker has no checkpoint folder")
        folder = self.checkpoint_dir / str(self.request.id)
        tag = f"after-step-{step}"
        self.engine.save_checkpoint(str(folder), tag=tag)
        old = self.engine
        self.build_engine()
        if hasattr(old, "destroy"):
            old.destroy()
        path, _ = self.engine.load_checkpoint(str(folder), tag=tag, load_optimizer_states=True,
                                              load_lr_scheduler_states=False)
        if path is None:
            raise RuntimeError(f"load_checkpoint found no checkpoint {tag} in {folder}")

    # ------------------------------------------------------------------------------------ the result

    def optimizer_state(self) -> Any:
        from accumcheck_adapter import OptimizerStateReport

        state = self.basic_optimizer.state
        kind = self.scenario.optimizer.kind
        first_key = "momentum_buffer" if kind == "sgd" else "exp_avg"
        report = OptimizerStateReport()
        report.first_moment = self.by_name(lambda t: state.get(t, {}).get(first_key))
        report.second_moment = self.by_name(lambda t: state.get(t, {}).get("exp_avg_sq"))
        for name in self.names:
            report.step_count[name] = self.step_counts[name]
        if kind != "sgd":
            # Adam / AdamW keep the count themselves: one per stepped tensor (a flat partition holds them all).
            steps = {}
            if self.stage == 0:
                for name, p in self.model.named_parameters():
                    if "step" in state.get(p, {}):
                        steps[name] = int(state[p]["step"])
            else:
                for part, entries, _ in self.layout:
                    if "step" in state.get(part, {}):
                        for e in entries:
                            steps[e.name] = int(state[part]["step"])
            for name in self.names:
                report.step_count[name] = steps.get(name, 0)
        return report

    def parameters(self) -> dict[str, Any]:
        """Every parameter after the last window. ZeRO-3 keeps each rank's partition only (the module's tensors
        are empty between forwards): deepspeed.zero.GatheredParameters all-gathers them, on every rank, one
        parameter at a time. Given several, releases before DeepSpeed PR #8539 (0.19.8 has it) launch one async
        gloo all-gather per parameter and wait only for the last: gloo runs them on independent threads, so an
        earlier parameter can be read from its uninitialised buffer (NaN in 1 of 3 two-rank runs of 0.18.9 here).
        A single parameter takes the blocking gather in every pinned release."""
        if self.stage != 3:
            out = {n: p.detach().float().tolist() for n, p in self.model.named_parameters()}
        else:
            out = {}
            for n, p in self.model.named_parameters():
                with self.ds.zero.GatheredParameters([p], modifier_rank=None):
                    out[n] = p.detach().float().clone().reshape(p.ds_shape).tolist()
        if self.bf16:
            # The fp32 master weights (the ZeRO optimizer's flat partitions, what SGD / Adam stepped), not the
            # module's bf16 copies of them; frozen parameters (no master) are the module's, bf16 as stored.
            master = self.by_name(lambda t: t)
            out.update({n: v for n, v in master.items() if v is not None})
        return out

    def run(self) -> Any:
        from accumcheck_adapter import Result

        for call in self.request.calls:
            if call.name == "set_boundary":
                self.engine.set_gradient_accumulation_boundary(call.value)
            elif call.name == "backward":
                self.backward(call.step, call.micro_batch)
            elif call.name == "step":
                self.step()
            elif call.name == "end_window":
                self.end_window(call.step)
            elif call.name == "checkpoint":
                self.checkpoint(call.step)
            else:
                raise RuntimeError(f"unknown engine call {call.name!r}")
        parameters = self.parameters()
        result = Result(self.reports, parameters, self.optimizer_state())
        if hasattr(self.engine, "destroy"):
            self.engine.destroy()
        return result


def micro_batch_reaches_trainable(m: Any, seqs: list[Any]) -> bool:
    """Whether the forward of these sequences involves a trainable parameter (section 5 of the protocol: the
    dense models always run every layer; a routed expert only for the tokens routed to it)."""
    trainable = {n for n in m.parameter_names() if not m.is_frozen(n)}
    if not m.has_experts:
        return bool(trainable)
    reached = {e for seq in seqs for e in seq.expert_index}
    return any(f"expert{e}.weight" in trainable or f"expert{e}.bias" in trainable for e in reached)


def reached_experts(m: Any, seqs: list[Any]) -> set[int]:
    """The routed experts these sequences reach (empty for a model without experts)."""
    return {e for seq in seqs for e in seq.expert_index} if m.has_experts else set()


# ------------------------------------------------------------------------------------------ the process


def warm_up_request(world_size: int, zero_stage: int, offload: bool) -> Any:
    """The catalogue's example (G = 3, micro-batch gradients 1, 10, 100, one scalar) as a run request."""
    import catalogue

    return catalogue.request(accumulation_steps=3, gradients=(1, 10, 100), zero_stage=zero_stage, offload=offload,
                             rank_count=world_size)


def warm_up(ds: Any, rank: int, world_size: int, checkpoint_dir: Path | None) -> dict[str, Any]:
    """The first initialize, backward and step of a process import and build lazily (~0.3 s); after one trial of
    each kind, gc.freeze() keeps DeepSpeed's gc.collect() inside initialize (see_memory_usage) from walking every
    long-lived object at each trial (~0.3 s -> ~10 ms per trial). Returns what the ready line says."""
    start = time.monotonic()
    warm_ups = [(0, False)]
    if world_size == 1 or ds.__version__ not in release.TWO_RANK_ZERO_FAILS:
        warm_ups.append((2, True))
    warm_ups.append((3, False))
    for stage, offload in warm_ups:
        Trial(ds, warm_up_request(world_size, stage, offload), rank, world_size, checkpoint_dir).run()
    gc.collect()
    gc.freeze()
    return {"version": ds.__version__, "warm_up_s": round(time.monotonic() - start, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description="one rank of the real-DeepSpeed adapter")
    parser.add_argument("--version", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--checkpoint-dir", type=Path)
    args = parser.parse_args()
    reply = worker_ranks.reply_stream(args.reply_fd)  # DeepSpeed and torch print on stdout: into the log
    os.environ.update({"RANK": str(args.rank), "LOCAL_RANK": str(args.rank), "WORLD_SIZE": str(args.world_size),
                       "LOCAL_SIZE": str(args.world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(args.port)})
    try:
        ds = release.load_deepspeed(args.version)
        from accumcheck_adapter import deterministic_torch

        deterministic_torch()
        ds.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S), rank=args.rank,
                            world_size=args.world_size)
        ready = warm_up(ds, args.rank, args.world_size, args.checkpoint_dir)
    except Exception as e:
        worker_ranks.send_start_failure(reply, e)
        return 1

    def run(request: Any) -> Any:
        return Trial(ds, request, args.rank, args.world_size, args.checkpoint_dir).run()

    return worker_ranks.serve_rank(run, args.rank, args.world_size, reply, ready)


if __name__ == "__main__":
    raise SystemExit(main())
