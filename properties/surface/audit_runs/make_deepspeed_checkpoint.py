"""Writes deepspeed-checkpoint-zero2-offload/: a real DeepSpeed 0.16.4 checkpoint (engine.save_checkpoint after one
optimizer step) of a ZeRO-2 run with the optimizer offloaded to the CPU and G = 3, the configuration that drops
micro-batch 1 of every window. Its model-states file records the ds_config and ds_version that audit reads.

Run once with the torch environment's Python after scripts/deepspeed-env.sh has installed 0.16.4:
    .venv/torch/bin/python properties/surface/audit_runs/make_deepspeed_checkpoint.py
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "adapters" / "deepspeed"))
import release  # noqa: E402  (adapters/deepspeed/release.py: loads one installed release)

CONFIG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 3, "gradient_clipping": 0.0,
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
          "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False, "steps_per_print": 1000}


def main() -> None:
    # a one-rank group: port 0, the store binds one the kernel picks (accumcheck_adapter.ranks.group_port)
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"})
    ds = release.load_deepspeed("0.16.4")
    import torch

    ds.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False, rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    engine, *_ = ds.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), config=CONFIG)
    for k in range(3):
        loss = engine(torch.full((1, 2), float(10**k))).sum()
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(str(HERE / "deepspeed-checkpoint-zero2-offload"), tag="global_step1")


if __name__ == "__main__":
    main()
