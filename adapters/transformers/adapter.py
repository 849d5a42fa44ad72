"""transformers: accumcheck drives the REAL `transformers.Trainer` loop of a pinned release.

docs/transformers-adapter.md says what is measured; docs/adapter-protocol.md is the protocol.

    adapter.py --version 4.45.2        (adapters/transformers-4.45.2/adapter.json runs this)
    adapter.py --version 4.46.3 --deepspeed 0.16.4   (the Trainer over real DeepSpeed, one rank: DEEPSPEED_CAPABILITIES)

Upstream code that runs: transformers X.Y.Z and the accelerate pinned with it, as released on PyPI, installed
unmodified by scripts/transformers-env.sh into .venv/transformers/X.Y.Z, on torch 2.6.0, CPU:
`Trainer.train` and everything it calls for each run request (trainer_run.py says exactly what, release by release),
in this process for one rank, and for two in two worker.py processes joined by gloo (DDP, as torchrun starts them;
worker.py says what more runs).
Ours: this process (the protocol, through the kit's serve; the two-rank workers through accumcheck_adapter.ranks,
and the check that both ranks report the same), the import settings (release.py), and in trainer_run.py the model,
dataset, collator, sequential sampler, the optimizer handed to the Trainer, and the reading of what the optimizer
consumed.

Declared (the Trainer without DeepSpeed, as a user runs it alone or under torchrun): one or two ranks, ZeRO 0, no
offload, fp32, precision "full", every model kind, routed experts and frozen parameters (torch.optim skips a
parameter without .grad; missing_gradient_is_zero false), the token-mean aggregation only (a Hugging Face model's
loss is a token mean over labels != -100), SGD (momentum, dampening, Nesterov), Adam and AdamW with weight decay
(the kit's torch.optim, passed through `optimizers=`), clipping (TrainingArguments.max_grad_norm; 0 when the
scenario has none, which the Trainer reads as off), windows of exactly G micro-batches (uneven_windows false:
the Trainer cuts the epoch into windows of G batches, and only the epoch's last one may be shorter, which a
scenario of several windows cannot express), no checkpoints. With every window exactly G micro-batches, the
scenario's boundary mode and step() pattern (automatic or manual, step() after every backward or once per window)
all describe one program, the Trainer's: G forward/backward passes, then one optimizer step (docs/adapter-protocol.md
section 4), so all are declared and `calls` is not read.
Reports: the applied gradient (a step pre-hook on the optimizer), optimizer state. Not reported: the grad norm
and the clip coefficient (the Trainer keeps the norm in a local variable of its loop, only when it clips, and
hands it to logging; no clip factor at all).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import release  # noqa: E402
from accumcheck_adapter import (  # noqa: E402
    Adapter,
    Capabilities,
    Limits,
    Reports,
    Result,
    RunRequest,
    Unsupported,
    serve,
)
from accumcheck_adapter.ranks import WorkerFault, WorkerGroup  # noqa: E402
from accumcheck_adapter.scenario import MODEL_KINDS, OPTIMIZERS  # noqa: E402

# Over a real DeepSpeed release (--deepspeed): the Trainer hands the model and the optimizer to DeepSpeed through
# accelerate, one rank. DeepSpeed's rules of the DeepSpeed adapter: ZeRO 0-2 (ZeRO-3 is not read here), offload
# with ZeRO-1/2, a trainable parameter without a gradient is stepped on the zeros of its flat partition
# (missing_gradient_is_zero; routed experts are refused with ZeRO-0 per run).
DEEPSPEED_CAPABILITIES = Capabilities(
    models=MODEL_KINDS, experts=True, frozen_parameters=True, aggregations=("token-mean",), optimizers=OPTIMIZERS,
    momentum=True, weight_decay=True, clipping=True, world_sizes=(1,), zero_stages=(0, 1, 2), offload=(False, True),
    dtypes=("fp32",), precisions=("full",), loss_scaling=False, boundary=("automatic", "manual"),
    step_after_every_backward=(True, False), uneven_windows=False, checkpoint=False,
    reports=Reports(applied_gradient=True, grad_norm=False, clip_coefficient=False, optimizer_state=True),
    missing_gradient_is_zero=True,
    limits=Limits(rank_count_max=1, step_count_max=16, micro_batch_count_max=16, token_count_max=1024))

CAPABILITIES = Capabilities(
    models=MODEL_KINDS, experts=True, frozen_parameters=True, aggregations=("token-mean",), optimizers=OPTIMIZERS,
    momentum=True, weight_decay=True, clipping=True, world_sizes=(1, 2), zero_stages=(0,), offload=(False,),
    dtypes=("fp32",), precisions=("full",), loss_scaling=False, boundary=("automatic", "manual"),
    step_after_every_backward=(True, False), uneven_windows=False, checkpoint=False,
    reports=Reports(applied_gradient=True, grad_norm=False, clip_coefficient=False, optimizer_state=True),
    missing_gradient_is_zero=False,
    limits=Limits(rank_count_max=2, step_count_max=16, micro_batch_count_max=16, token_count_max=1024))

# Several ranks run in worker.py processes (accumcheck_adapter.ranks), below accumcheck's --adapter-start-timeout
# (120 s) and --adapter-timeout (60 s): a worker imports torch and transformers and runs one warm-up Trainer
# (about 10-20 s on two busy cores); a run takes tens of milliseconds.
START_DEADLINE_S = 100.0
RUN_DEADLINE_S = 45.0


class TransformersAdapter(Adapter):
    def __init__(self, version: str, deepspeed: str | None = None) -> None:
        self.release = version
        self.deepspeed = deepspeed
        self.name = f"transformers-{version}" + ("" if deepspeed is None else f"+deepspeed-{deepspeed}")
        self.version = version
        self.description = (f"the REAL transformers {version} Trainer loop (PyPI release, CPU, "
                            + ("no DeepSpeed; one process, or two ranks of DDP over gloo)" if deepspeed is None
                               else f"one process, over the REAL DeepSpeed {deepspeed})"))
        ds = None if deepspeed is None else release.load_deepspeed(deepspeed)
        release.load_transformers(version)
        import trainer_run

        trainer_run.DEEPSPEED = ds
        self.trainer_run = trainer_run
        self.groups: dict[int, WorkerGroup] = {}
        # Each Trainer.train starts with accelerate's free_memory, a gc.collect() that walks every object torch and
        # transformers keep (about 0.4 s a run). One run warms every lazy import and cache, then gc.freeze() moves
        # what exists into the permanent generation, which collect() skips: runs take tens of milliseconds.
        trainer_run.run(trainer_run.warm_up_request())
        gc.collect()
        gc.freeze()
        print(f"transformers adapter: {json.dumps(trainer_run.describe())}", file=sys.stderr)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES if self.deepspeed is None else DEEPSPEED_CAPABILITIES

    def run(self, request: RunRequest) -> Result:
        start = time.monotonic()
        ranks = request.scenario.engine.rank_count
        result = self.trainer_run.run(request) if ranks == 1 else self.run_on_ranks(request, ranks)
        print(f"transformers adapter: run {request.id} took {time.monotonic() - start:.3f} s", file=sys.stderr)
        return result

    def run_on_ranks(self, request: RunRequest, world_size: int) -> Result:
        """The run on `world_size` worker.py processes (started at the first such run). Data parallelism leaves
        the same applied gradients, parameters and optimizer state on every rank: they are compared, and rank 0's
        are reported."""
        if self.deepspeed is not None:  # the capabilities say one rank; a request past them is refused here too
            raise Unsupported(f"{world_size} ranks over DeepSpeed: the Trainer over DeepSpeed runs one rank here")
        if world_size not in self.groups:
            self.groups[world_size] = WorkerGroup(
                lambda rank, port: [sys.executable, str(HERE / "worker.py"), "--version", self.release, "--rank",
                                    str(rank), "--world-size", str(world_size), "--port", str(port)],
                world_size, start_deadline_s=START_DEADLINE_S, run_deadline_s=RUN_DEADLINE_S, cwd=HERE)
        try:
            results = self.groups[world_size].run(request)
        except WorkerFault:
            self.groups.pop(world_size).stop(kill=True)
            raise
        for rank, other in enumerate(results[1:], start=1):
            if other != results[0]:
                raise RuntimeError(f"rank {rank} reports other gradients, parameters or optimizer state than rank 0 "
                                   "after the same data-parallel run")
        return Result.from_json(results[0])

    def close(self) -> None:
        for group in self.groups.values():
            group.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="accumcheck adapter for the Trainer of a real transformers release")
    parser.add_argument("--version", required=True,
                        help="the transformers release, X.Y.Z (scripts/transformers-env.sh)")
    parser.add_argument("--deepspeed", metavar="X.Y.Z",
                        help="run the Trainer over this real DeepSpeed release (scripts/deepspeed-env.sh)")
    args = parser.parse_args()
    if args.deepspeed is not None and not release.deepspeed_release().installed(args.deepspeed):
        print(f"transformers adapter: DeepSpeed {args.deepspeed} is not installed: run "
              f"ACCUMCHECK_DEEPSPEED_RELEASES={args.deepspeed} scripts/deepspeed-env.sh", file=sys.stderr)
        return 1
    if not release.installed(args.version):
        print(f"transformers adapter: transformers {args.version} is not installed in "
              f"{release.release_dir(args.version)}: run {release.install_command(args.version)}", file=sys.stderr)
        return 1
    from accumcheck_adapter import deterministic_torch

    deterministic_torch()
    with contextlib.redirect_stdout(sys.stderr):  # importing may print; stdout is the protocol's
        adapter = TransformersAdapter(args.version, args.deepspeed)
    try:
        return serve(adapter)
    finally:
        adapter.close()


if __name__ == "__main__":
    raise SystemExit(main())
