"""torch-loop: accumcheck drives a plain PyTorch training loop (docs/adapter-protocol.md).

Upstream code that runs: torch 2.6.0 (adapters/requirements-torch.txt) autograd, which sums the window's
backward calls into .grad; torch.optim.SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW,
single-tensor path (foreach=False, fused=False, amsgrad/maximize/capturable off); torch.nn.utils.clip_grad_norm_
(eps 1e-6); state_dict / torch.save / torch.load / load_state_dict for checkpoint and resume.
Ours (adapters/python, accumcheck_adapter): the three synthetic models as nn.Modules, the window-global
loss coefficients, the loop order (zero, backward per micro-batch, clip, step, zero), and the reporting.

Declared: one rank, ZeRO stage 0, no offload, fp32 and fp64, precision "full" only for now (bf16/fp16 autocast
and loss scaling are not written yet), every model, aggregation and optimizer, uneven windows, checkpoints,
every report. missing_gradient_is_zero is false: torch.optim skips a parameter whose .grad is None.
"""

from __future__ import annotations

from accumcheck_adapter import LoopAdapter, TorchLoop, deterministic_torch, serve


def main() -> int:
    # One intra-op thread and deterministic kernels, so that a trial replays bit for bit and float sums do
    # not depend on how many threads split them (see deterministic_torch).
    deterministic_torch()
    adapter = LoopAdapter(TorchLoop, name="torch-loop", version="1.0",
                          description="a plain PyTorch loop (torch.optim, clip_grad_norm_, state_dict checkpoints)",
                          capabilities=TorchLoop.CAPABILITIES)
    return serve(adapter)


if __name__ == "__main__":
    raise SystemExit(main())
