"""Probe (open, not explained): DeepSpeed ZeRO-0, G = 3, engine.backward(loss, scale_wrt_gas=False).

One scalar w = 0, micro-batch losses 1 w, 10 w, 100 w, SGD lr 1, engine.step() after every backward. With the
1/G scaling turned off, one optimizer step at the boundary applies 1 + 10 + 100: w = -111. Prints w, once with the
forward's output itself passed to backward (what the transformers Trainer passes) and once with `output * 1`.

    .venv/torch/bin/python docs/upstream/open/deepspeed-zero0-scale-wrt-gas.py 0.19.8

Uses the release installed by scripts/deepspeed-env.sh, loaded as adapters/deepspeed/release.py loads it.
"""

import importlib.util
import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("deepspeed_release", ROOT / "adapters" / "deepspeed" / "release.py")
loader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loader)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
deepspeed = loader.load_deepspeed(sys.argv[1])

import torch  # noqa: E402

deepspeed.init_distributed(dist_backend="gloo")


class Scalar(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, c: float) -> torch.Tensor:
        return self.w.sum() * c


for variant in ("the output itself", "output * 1"):
    model = Scalar()
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 3, "zero_optimization": {"stage": 0},
              "steps_per_print": 2**31 - 1}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                                      config=config)
    for c in (1.0, 10.0, 100.0):
        out = engine(c)
        engine.backward(out if variant == "the output itself" else out * 1, scale_wrt_gas=False)
        engine.step()
    print(f"DeepSpeed {deepspeed.__version__}, ZeRO-0, backward({variant}, scale_wrt_gas=False): w = {model.w.item()}",
          flush=True)
