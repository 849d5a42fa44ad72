"""One rank of the transformers adapter's scenarios of several ranks: a long-lived process that runs each run
request through the real Trainer as rank --rank of --world-size (accumcheck_adapter.ranks starts it and speaks
with it: run requests on stdin, replies on --reply-fd).

Upstream code that runs, beyond trainer_run.py's: accelerate's MULTI_CPU state (PartialState, created by the first
TrainingArguments of this process from the torchrun-style variables set below: RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) joins a gloo process group on 127.0.0.1; the Trainer wraps the model
in torch's DistributedDataParallel (Trainer's find_unused_parameters rule), accelerate shards the dataloader
(rank r gets batches r, R + r, ...), `accelerator.accumulate` skips the all-reduce (no_sync) inside a window, and
the window's last backward averages the gradients over the ranks. The process group lives as long as this process
(accelerate's state is a singleton); every run builds its own Trainer and DDP wrapper.
Ours: these variables, the import settings (release.py), and the run (trainer_run.py with RANK and WORLD_SIZE set).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import release  # noqa: E402
from accumcheck_adapter import ranks  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description="one rank of the transformers adapter")
    parser.add_argument("--version", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args()
    reply = ranks.reply_stream(args.reply_fd)  # transformers and torch print on stdout: into the log
    os.environ.update(RANK=str(args.rank), LOCAL_RANK=str(args.rank), WORLD_SIZE=str(args.world_size),
                      LOCAL_WORLD_SIZE=str(args.world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port),
                      GLOO_SOCKET_IFNAME="lo")
    try:
        start = time.monotonic()
        release.load_transformers(args.version)
        from accumcheck_adapter import deterministic_torch

        deterministic_torch()
        import trainer_run

        trainer_run.RANK, trainer_run.WORLD_SIZE = args.rank, args.world_size
        with contextlib.redirect_stdout(sys.stderr):
            trainer_run.run(trainer_run.warm_up_request(args.world_size))  # also forms the process group
        gc.collect()
        gc.freeze()  # as adapter.py: Trainer.train's gc.collect() then skips what exists now
        ready = {"version": args.version, "warm_up_s": round(time.monotonic() - start, 3)}
    except Exception as e:
        ranks.send_start_failure(reply, e)
        return 1
    return ranks.serve_rank(trainer_run.run, args.rank, args.world_size, reply, ready)


if __name__ == "__main__":
    raise SystemExit(main())
