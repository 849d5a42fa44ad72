"""DeepSpeed ZeRO-0: engine.backward(loss, scale_wrt_gas=False) divides by G anyway when `loss` is the forward's output.

Run from the accumcheck repository root (CPU, one process, no launcher needed):

    PYTHONPATH=.venv/deepspeed/0.19.8:.venv/deepspeed/_deps .venv/torch/bin/python \
        docs/upstream/deepspeed-zero0-scale-wrt-gas-ignored.py [--times-one]

One scalar w = 0, no ZeRO (stage 0), G = 3, micro-batch losses 1 w, 10 w, 100 w, each the tensor engine(c) returns,
passed to engine.backward(loss, scale_wrt_gas=False) as the transformers Trainer (4.49+) does under DeepSpeed;
step() after every backward; SGD lr 1, clipping off. With the 1/G turned off, the one optimizer step applies
1 + 10 + 100 = 111. --times-one passes `loss * 1` instead (a new tensor), the workaround.
Exit status: 1 if the applied gradient is not 111, 0 if it is, 2 if the run failed.
"""

import argparse
import os
import socket
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times-one", action="store_true", help="pass loss * 1 to engine.backward")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # CPU-only settings; none is needed on a GPU machine.
    os.environ.update(DS_ACCELERATOR="cpu", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.modules["triton"] = None  # the CUDA torch wheel ships triton, whose import fails without a GPU driver
    import logging

    import deepspeed
    import deepspeed.ops
    import torch

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # skip a 75 s g++ build of an inference-only op
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)

    class Scalar(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, c: float) -> torch.Tensor:
            return self.w.sum() * c

    model = Scalar()
    # gradient_clipping pinned off: 0.19 made 1.0 the default, which would clip 111 to 1.
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 3, "zero_optimization": {"stage": 0},
              "gradient_clipping": 0.0, "steps_per_print": 2**31 - 1}
    try:
        engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                                          config=config)
        for c in (1.0, 10.0, 100.0):
            loss = engine(c)
            engine.backward(loss * 1 if args.times_one else loss, scale_wrt_gas=False)
            engine.step()
    except Exception as e:
        print(f"DeepSpeed {deepspeed.__version__}: the run failed: {e!r}")
        return 2
    applied = -model.w.item()
    what = "loss * 1" if args.times_one else "the forward's output itself"
    print(f"DeepSpeed {deepspeed.__version__}, ZeRO-0, G = 3, backward({what}, scale_wrt_gas=False): applied "
          f"gradient {applied:g}, expected 111")
    return 0 if abs(applied - 111.0) < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
