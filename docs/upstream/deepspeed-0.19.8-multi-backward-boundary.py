"""DeepSpeed ZeRO-1/2, gradient_accumulation_steps = 1, several engine.backward() calls before one engine.step().

Run from the accumcheck repository root (CPU, one process, no launcher needed):

    PYTHONPATH=.venv/deepspeed/0.19.8:.venv/deepspeed/_deps .venv/torch/bin/python \
        docs/upstream/deepspeed-0.19.8-multi-backward-boundary.py [--stage 1|2] [--offload on|off] \
        [--manual-boundary | --unmanaged]

One trainable scalar w, loss_k = c_k * w, so the gradient of backward k is c_k. Each optimizer step is three
backwards and one step(): c = (1, 10, 100), then (1000, 10000, 100000). SGD with lr 1 moves w by exactly the
gradient it applied, so the applied gradient is w_before - w_after, exact in fp32, and its digits say which
backwards reached the optimizer. Expected: 111, then 111000 (what ZeRO-0 and ZeRO-3 give).

Default: ZeRO-1 and ZeRO-2, offload off and on, all four (--stage 0 or 3 shows the reference behaviour).
--manual-boundary marks only the last backward as the boundary (set_gradient_accumulation_boundary);
--unmanaged sets managed_gradient_accumulation false (0.19.4 and later).
Exit status: 1 if any configuration applied a wrong gradient, 0 if all were right.
"""

import argparse
import os
import platform
import sys

# CPU-only settings; none is needed on a GPU machine. DeepSpeed's CPU accelerator; torch 2.6's torch.load default
# (only 0.15.1's load_checkpoint needs it); a single process is rank 0 of 1.
os.environ.update(DS_ACCELERATOR="cpu", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
for key, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT="29541").items():
    os.environ.setdefault(key, value)
sys.modules["triton"] = None  # the CUDA torch wheel ships triton, whose import fails without a GPU driver

import logging  # noqa: E402

import deepspeed  # noqa: E402
import deepspeed.ops  # noqa: E402
import torch  # noqa: E402
from deepspeed.accelerator import get_accelerator  # noqa: E402
from deepspeed.utils import safe_get_full_fp32_param  # noqa: E402

deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # skip a 75 s g++ build of an inference-only op
logging.getLogger("DeepSpeed").setLevel(logging.WARNING)

WINDOWS = [(1, 10, 100), (1000, 10000, 100000)]


class Scalar(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, c):
        return (self.w * c).sum()


def weight(model, stage):
    """w as the optimizer holds it (ZeRO-3 partitions the module's parameter away)."""
    return safe_get_full_fp32_param(model.w).item() if stage == 3 else model.w.item()


def applied_gradients(stage, offload, manual_boundary, unmanaged):
    zero = {"stage": stage, "contiguous_gradients": True, "overlap_comm": False, "reduce_bucket_size": 1024,
            "allgather_bucket_size": 1024}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": 1,
              "gradient_clipping": 0.0, "zero_optimization": zero, "zero_allow_untested_optimizer": True,
              "zero_force_ds_cpu_optimizer": False, "steps_per_print": 2**31 - 1}
    if unmanaged:
        config["managed_gradient_accumulation"] = False
    model = Scalar()
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                                      config=config)
    got = []
    for window in WINDOWS:
        before = weight(model, stage)
        for k, c in enumerate(window):
            if manual_boundary:
                engine.set_gradient_accumulation_boundary(k == len(window) - 1)
            engine.backward(engine(torch.tensor([float(c)])))
        engine.step()
        got.append(before - weight(model, stage))
    if hasattr(engine, "destroy"):  # 0.16+
        engine.destroy()
    return got


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", type=int, choices=(0, 1, 2, 3), help="default: 1 and 2 (0 and 3 for reference)")
    parser.add_argument("--offload", choices=("on", "off"))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--manual-boundary", action="store_true")
    mode.add_argument("--unmanaged", action="store_true")
    args = parser.parse_args()
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    print(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}, python {platform.python_version()}, "
          f"accelerator {get_accelerator().device_name()}")
    loop = "manual boundary" if args.manual_boundary else "unmanaged" if args.unmanaged else "boundary left alone"
    print(f"gradient_accumulation_steps 1, 3 backward() per step(), {loop}")
    expected = [float(sum(w)) for w in WINDOWS]
    wrong = 0
    for stage in (1, 2) if args.stage is None else (args.stage,):
        for offload in (False, True) if args.offload is None else (args.offload == "on",):
            if stage == 0 and offload:
                continue  # DeepSpeed offloads the optimizer of ZeRO-1/2/3 only
            name = f"ZeRO-{stage} offload {'on ' if offload else 'off'}"
            try:
                got = applied_gradients(stage, offload, args.manual_boundary, args.unmanaged)
            except Exception as e:  # 0.17.6 - 0.18.2 raise in the second backward's epilogue
                wrong += 1
                print(f"  {name}: raised {type(e).__name__}: {e}")
                continue
            verdict = "ok" if got == expected else "WRONG"
            wrong += got != expected
            print(f"  {name}: applied {got[0]:g}, {got[1]:g}   expected {expected[0]:g}, {expected[1]:g}   {verdict}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
