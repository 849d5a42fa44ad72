"""torch-loop: accumcheck drives a plain PyTorch training loop (docs/adapter-protocol.md).

Upstream code that runs: torch 2.6.0 (adapters/requirements-torch.txt) autograd, which sums the window's
backward calls into .grad; torch.optim.SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW,
single-tensor path (foreach=False, fused=False, amsgrad/maximize/capturable off); torch.nn.utils.clip_grad_norm_
(eps 1e-6); state_dict / torch.save / torch.load / load_state_dict for checkpoint and resume; for precision
"bf16" and "fp16", torch.autocast(device_type="cpu", dtype=..., cache_enabled=True) around each forward.
Ours (adapters/python, accumcheck_adapter): the three synthetic models as nn.Modules, the window-global
loss coefficients, the loop order (zero, backward per micro-batch, clip, step, zero), and the reporting;
here, AutocastLoop, which opens the autocast region around micro_batch_loss only.

Declared: one rank, ZeRO stage 0, no offload, fp32 and fp64, precisions "full", "bf16" and "fp16" (16-bit
only with dtype fp32: the fp32 parameters are the master weights), no loss scaling, every model, aggregation
and optimizer, uneven windows, checkpoints, every report. missing_gradient_is_zero is false: torch.optim
skips a parameter whose .grad is None.

Mixed precision as PyTorch users write it on CPU: parameters, .grad and optimizer state stay fp32; the forward
runs under autocast, backward() is called after the region closes (as the AMP recipe says). What computes in
16 bits, checked on torch 2.6.0 (tests/test_torch_loop_precision.py pins it): CPU autocast's lower-precision
list is the GEMM-like ops (matmul, mm, bmm, addmm, linear, conv*, baddbmm, ... ) and its fp32 list is losses,
norms and linear algebra; every other op (add, sub, mul, pow, sum, relu, index_select) has no policy and runs
in its inputs' promoted dtype. So in our models only each `x @ W.T` is 16-bit: autocast rounds both operands
to the 16-bit type (features, weights; the embedding's rows come from an fp32 index_select), the CPU GEMM
accumulates in fp32 and rounds the product once to 16 bits (checked: correctly rounded up to K = 1000). The
bias add then promotes it back to fp32 (16-bit + fp32 -> fp32), so the residual, square, 1/2, token sum and
loss coefficients are fp32; the MLP's relu runs in fp32 and fc2's matmul rounds its output to 16 bits. In
backward, each matmul's gradients are 16-bit (the output gradient is rounded to 16 bits at the promoting add,
each micro-batch's weight gradient is rounded once) and are cast to fp32 before autograd accumulates them into
the fp32 .grad, so the window's sum over micro-batches, the bias gradients, clip_grad_norm_ and the optimizer
are fp32. docs/float-bounds.md charges the 16-bit unit roundoff (and its range) to every operation, which
covers all of this.

fp16 is plain fp16 autocast without a GradScaler: the scenarios accumcheck sends have no loss scaler unless
loss_scaling is declared, and it is not, because the oracle does not model a skipped step (docs/float-bounds.md).
torch 2.6 does have fp16 CPU autocast and torch.amp.GradScaler("cpu"), but a scaler the scenario does not ask
for would rescale the gradients and could skip a step, which the oracle does not follow. Without one, fp16 is
well defined (the scenario's fp16 with loss_scaler null, as sim/ models it): a gradient below fp16's
range underflows and one above overflows, and the bound, which charges fp16's range on every operation, then
says it cannot bound the trial (could not run) instead of accepting or rejecting it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from accumcheck_adapter import (
    Capabilities,
    LoopAdapter,
    MicroBatch,
    RunRequest,
    TorchLoop,
    Unsupported,
    deterministic_torch,
    serve,
)

# The dtype autocast computes its lower-precision ops in, by the scenario's engine.precision; "full": none.
AUTOCAST_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}


class AutocastLoop(TorchLoop):
    """TorchLoop with the forward of each micro-batch under CPU autocast when the scenario asks for 16 bits."""

    CAPABILITIES: ClassVar[Capabilities] = dataclasses.replace(
        TorchLoop.CAPABILITIES, precisions=("full", *AUTOCAST_DTYPES), loss_scaling=False)

    def __init__(self, request: RunRequest) -> None:
        engine = request.scenario.engine
        if engine.loss_scaler is not None:
            raise Unsupported("loss scaling: torch-loop declares loss_scaling false")
        if engine.precision != "full" and request.dtype != "fp32":
            raise Unsupported(f"precision {engine.precision!r} with dtype {request.dtype!r}: "
                              "16-bit autocast keeps fp32 master weights")
        self.autocast_dtype = AUTOCAST_DTYPES.get(engine.precision)
        super().__init__(request)

    def micro_batch_loss(self, batch: MicroBatch) -> torch.Tensor:
        if self.autocast_dtype is None:
            return super().micro_batch_loss(batch)
        with torch.autocast(device_type="cpu", dtype=self.autocast_dtype, enabled=True, cache_enabled=True):
            return super().micro_batch_loss(batch)


def main() -> int:
    # One intra-op thread and deterministic kernels, so that a trial replays bit for bit and float sums do
    # not depend on how many threads split them (see deterministic_torch).
    deterministic_torch()
    adapter = LoopAdapter(AutocastLoop, name="torch-loop", version="1.0",
                          description="a plain PyTorch loop (torch.optim, clip_grad_norm_, state_dict checkpoints)",
                          capabilities=AutocastLoop.CAPABILITIES)
    return serve(adapter)


if __name__ == "__main__":
    raise SystemExit(main())
