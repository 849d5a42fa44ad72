"""DeepSpeed ZeRO-2 + CPU offload: a parameter without a gradient in some micro-step of a window gets stale state.

Run from the accumcheck repository root (CPU, one process, no launcher needed):

    PYTHONPATH=.venv/deepspeed/0.19.8:.venv/deepspeed/_deps .venv/torch/bin/python \
        docs/upstream/deepspeed-0.19.8-offload-missing-grad.py [--stage 1|2|3] [--offload on|off] [--unmanaged]

Two trainable scalars a and b (think: two experts, or a branch used only by some micro-batches), loss = sum of
c * p over the parameters p the micro-batch uses, so each used parameter's gradient is its c. G = 3, the ordinary
loop (forward, backward, step() per micro-batch). Window 1 uses both parameters in every micro-batch; window 2
routes micro-batch 0 to b only and micro-batch 2 (the boundary) to a only:

    window 1:  a 1, 10, 100        b 1, 10, 100        expected a 111,    b 111
    window 2:  a -, 10^4, 10^5     b 10^3, 10^4, -     expected a 110000, b 11000

SGD with lr 1: the applied gradient is w_before - w_after, exact in fp32. Default ZeRO-2 with offload;
--unmanaged sets managed_gradient_accumulation false (0.19.4 and later) and calls step() once per window.
Exit status: 1 if the applied gradients are wrong, 0 if right (ZeRO-2 without offload, or ZeRO-1, are right).
"""

import argparse
import os
import platform
import sys

# CPU-only settings; none is needed on a GPU machine. DeepSpeed's CPU accelerator; torch 2.6's torch.load default
# (only 0.15.1's load_checkpoint needs it); a single process is rank 0 of 1.
os.environ.update(DS_ACCELERATOR="cpu", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
for key, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT="29542").items():
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

G = 3
# Per window, per micro-batch: the gradient of each parameter the micro-batch uses (a missing name: not used).
WINDOWS = [
    [{"a": 1, "b": 1}, {"a": 10, "b": 10}, {"a": 100, "b": 100}],
    [{"b": 1000}, {"a": 10000, "b": 10000}, {"a": 100000}],
]


class TwoScalars(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.zeros(1))
        self.b = torch.nn.Parameter(torch.zeros(1))

    def forward(self, **c):
        """Only the parameters named in c take part, as an expert that no token was routed to."""
        return sum((getattr(self, name) * x).sum() for name, x in c.items())


def weights(model, stage):
    """(a, b) as the optimizer holds them (ZeRO-3 partitions the module's parameters away)."""
    read = (lambda p: safe_get_full_fp32_param(p).item()) if stage == 3 else (lambda p: p.item())
    return read(model.a), read(model.b)


def applied_gradients(stage, offload, unmanaged):
    zero = {"stage": stage, "contiguous_gradients": True, "overlap_comm": False, "reduce_bucket_size": 1024,
            "allgather_bucket_size": 1024, "ignore_unused_parameters": True}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": G, "train_batch_size": G,
              "gradient_clipping": 0.0, "zero_optimization": zero, "zero_allow_untested_optimizer": True,
              "zero_force_ds_cpu_optimizer": False, "steps_per_print": 2**31 - 1}
    if unmanaged:
        config["managed_gradient_accumulation"] = False
    model = TwoScalars()
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                                      config=config)
    got = []
    for window in WINDOWS:
        before = weights(model, stage)
        for micro_batch in window:
            # DeepSpeed scales each loss by 1/G; the factor G keeps every gradient an integer.
            loss = engine(**{name: torch.tensor([float(G * c)]) for name, c in micro_batch.items()})
            engine.backward(loss)
            if not unmanaged:
                engine.step()  # the optimizer steps at the third call only
        if unmanaged:
            engine.step()
        after = weights(model, stage)
        got.append((before[0] - after[0], before[1] - after[1]))
    if hasattr(engine, "destroy"):  # 0.16+
        engine.destroy()
    return got


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", type=int, choices=(1, 2, 3), default=2)
    parser.add_argument("--offload", choices=("on", "off"), default="on")
    parser.add_argument("--unmanaged", action="store_true")
    args = parser.parse_args()
    offload = args.offload == "on"
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    print(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}, python {platform.python_version()}, "
          f"accelerator {get_accelerator().device_name()}")
    print(f"ZeRO-{args.stage}, offload {args.offload}, gradient_accumulation_steps {G}"
          f"{', unmanaged' if args.unmanaged else ''}")
    got = applied_gradients(args.stage, offload, args.unmanaged)
    wrong = False
    for i, (window, (a, b)) in enumerate(zip(WINDOWS, got, strict=True)):
        want_a = float(sum(m.get("a", 0) for m in window))
        want_b = float(sum(m.get("b", 0) for m in window))
        ok = (a, b) == (want_a, want_b)
        wrong |= not ok
        print(f"  window {i + 1}: applied a {a:g}, b {b:g}   expected a {want_a:g}, b {want_b:g}   "
              f"{'ok' if ok else 'WRONG'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
