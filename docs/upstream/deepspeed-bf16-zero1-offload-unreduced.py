"""DeepSpeed ZeRO-1 + CPU offload in bf16 with fp32 gradient accumulation: gradients are never averaged across ranks.

Run from the accumcheck repository root (CPU, two processes that this script starts itself, no launcher needed):

    PYTHONPATH=.venv/deepspeed/0.17.6:.venv/deepspeed/_deps .venv/torch/bin/python \
        docs/upstream/deepspeed-bf16-zero1-offload-unreduced.py \
        [--stage 1|2] [--offload on|off] [--grad-accum fp32|bf16]

Two data-parallel ranks, a bias-free nn.Linear(3, 1) at zero in bf16, loss = w . c_r on rank r, so rank r's
gradient is c_r: c_0 = (1, 2, 3), c_1 = (10, 20, 30). DeepSpeed averages over ranks, so the applied gradient must
be (5.5, 11, 16.5); every value here is exact in bf16 and fp32. SGD with lr 1: the applied gradient is
w_before - w_after, read from the fp32 master weights. G = 1, one backward and one step().

ZeRO pads the three trainable elements to 4 and gives each rank 2: rank 0 owns elements 0 and 1, rank 1 element 2.
Before 0.19.8 the default (ZeRO-1, offload on, grad_accum_dtype fp32) applies (1, 2, 30): each rank steps its
partition on its own gradient. ZeRO-2, offload off (DeepSpeed then uses BF16_Optimizer) or grad_accum_dtype bf16
(the default when data_types is absent) are right.
Exit status: 1 if the applied gradient is wrong, 0 if right, 2 if a rank failed.
"""

import argparse
import os
import platform
import socket
import sys
import time

import torch.multiprocessing as mp

C = [(1.0, 2.0, 3.0), (10.0, 20.0, 30.0)]
WORLD = len(C)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, port, args, results):
    # CPU-only settings; none is needed on a GPU machine (there, launch with deepspeed and drop these lines).
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.modules["triton"] = None  # the CUDA torch wheel ships triton, whose import fails without a GPU driver
    import logging

    import deepspeed
    import deepspeed.ops
    import torch
    from deepspeed.utils import safe_get_full_fp32_param

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # skip a 75 s g++ build of an inference-only op
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)

    zero = {"stage": args.stage, "contiguous_gradients": True, "overlap_comm": False, "reduce_bucket_size": 1024,
            "allgather_bucket_size": 1024}
    if args.offload == "on":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": WORLD,
              "gradient_clipping": 0.0, "bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": args.grad_accum},
              "zero_optimization": zero, "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              "steps_per_print": 2**31 - 1}
    model = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                                      config=config)
    before = safe_get_full_fp32_param(model.weight).flatten().tolist()
    loss = engine(torch.tensor([C[rank]], dtype=torch.bfloat16)).sum()
    engine.backward(loss)
    engine.step()
    after = safe_get_full_fp32_param(model.weight).flatten().tolist()
    results[rank] = {"applied": [b - a for b, a in zip(before, after, strict=True)],
                     "optimizer": type(engine.optimizer).__name__, "version": deepspeed.__version__,
                     "torch": torch.__version__}
    if hasattr(engine, "destroy"):  # 0.16+
        engine.destroy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", type=int, choices=(1, 2), default=1)
    parser.add_argument("--offload", choices=("on", "off"), default="on")
    parser.add_argument("--grad-accum", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    with mp.Manager() as manager:
        results = manager.dict()
        context = mp.start_processes(rank_main, args=(free_port(), args, results), nprocs=WORLD, join=False,
                                     start_method="spawn")
        deadline = time.monotonic() + 600
        try:
            while not context.join(timeout=5):
                if time.monotonic() > deadline:
                    for process in context.processes:
                        process.kill()
                    print("a rank did not finish within 600 s (killed)", file=sys.stderr)
                    return 2
        except Exception as e:  # a rank raised
            print(f"a rank failed: {e}", file=sys.stderr)
            return 2
        results = dict(results)
    if len(results) != WORLD:
        print("a rank returned no result", file=sys.stderr)
        return 2
    r0 = results[0]
    print(f"deepspeed {r0['version']}, torch {r0['torch']}, python {platform.python_version()}, "
          f"{WORLD} ranks (gloo, CPU); optimizer {r0['optimizer']}")
    print(f"ZeRO-{args.stage}, offload {args.offload}, bf16, grad_accum_dtype {args.grad_accum}, "
          "gradient_accumulation_steps 1")
    want = [sum(c[i] for c in C) / WORLD for i in range(3)]
    wrong = False
    for rank in range(WORLD):
        got = results[rank]["applied"]
        ok = got == want
        wrong |= not ok
        print(f"  rank {rank}: applied {', '.join(f'{g:g}' for g in got)}   expected "
              f"{', '.join(f'{w:g}' for w in want)}   {'ok' if ok else 'WRONG'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
