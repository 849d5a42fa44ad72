"""torch-ddp: accumcheck drives a real torch.nn.parallel.DistributedDataParallel job (docs/adapter-protocol.md).

Upstream code that runs (torch 2.6.0, adapters/requirements-torch.txt): torch.distributed with the gloo
backend over loopback (TCPStore, init_process_group, new_group, broadcast_object_list); DistributedDataParallel
(find_unused_parameters=True, no_sync, its reducer's bucketed all-reduce that averages the ranks' gradients and
its record of which parameters took part); torch.distributed.optim.ZeroRedundancyOptimizer for ZeRO-1
(partitioned optimizer state, consolidate_state_dict, load_state_dict, parameter broadcast after step);
torch.optim SGD/Adam/AdamW single-tensor paths; torch.nn.utils.clip_grad_norm_; autograd; torch.save/torch.load.
Ours: the synthetic models and the window-global loss coefficients (adapters/python, the kit), the window loop
and the world-size factor, the zero-gradient anchor that makes a rank without a graph join DDP's all-reduce
(ddp_loop.py), the rank processes, the request hand-off to rank 1, the check that both ranks applied the same
gradient, and the failure handling (ddp_ranks.py).

Declared: world sizes 1 and 2 (a one-rank scenario runs DDP on the group {0}; property 2 needs it), ZeRO
stages 0 and 1, no offload, fp32 and fp64, precision "full", every model, aggregation and optimizer, routed
experts (DDP with find_unused_parameters=True gives absent gradients the oracle's meaning: see ddp_loop.py),
frozen parameters, both boundaries, both loop shapes, uneven windows, checkpoints, every report.
missing_gradient_is_zero is false: torch.optim (also inside ZeroRedundancyOptimizer) skips a parameter whose
.grad is None.
"""

from __future__ import annotations

from ddp_ranks import main


def ddp_loop() -> type:
    """The loop class, imported only when main asks: rank 0 starts rank 1 first, so both import torch at once."""
    from ddp_loop import DdpLoop

    return DdpLoop


if __name__ == "__main__":
    main(ddp_loop, name="torch-ddp", version="1.0",
         description="torch DistributedDataParallel on gloo, world size 2 (ZeRO-1 through ZeroRedundancyOptimizer)")
