"""deepspeed: accumcheck drives a REAL DeepSpeed release (docs/deepspeed-adapter.md, docs/adapter-protocol.md).

    adapter.py --version 0.16.4        (adapters/deepspeed-0.16.4/adapter.json runs this)

Upstream code that runs: DeepSpeed X.Y.Z as released on PyPI, installed unmodified by scripts/deepspeed-env.sh into
.venv/deepspeed/X.Y.Z, on torch 2.6.0 with DeepSpeed's CPU accelerator and gloo: deepspeed.initialize,
engine.forward / backward / step / set_gradient_accumulation_boundary / get_global_grad_norm /
save_checkpoint / load_checkpoint, ZeRO stages 0-3 with and without CPU offload of the optimizer, and the
torch.optim optimizer DeepSpeed steps. worker.py says exactly what is read and how.
Ours: this process (the protocol, no torch in it, so the handshake is instant), which hands each run request to
long-lived worker processes (worker.py), one per rank: one worker for one-rank scenarios, a pair joined by a gloo
process group on 127.0.0.1 for two ranks. Three settings around the import (release.py) and the pinned config
(ds_config.py).

Deadlines and failures: accumcheck_adapter.ranks (WorkerGroup), whose rules were made here. A one-rank worker
survives a failed trial (each trial builds its own engine); on two ranks a failure every rank raised at the same
line keeps the pair (0.17.6's TypeError on a second boundary backward before step(), for one); any other restarts it.

Declared: ZeRO 0, 1, 2, 3 (ZeRO-3 measured on every pinned release); offload off and on (ZeRO-1/2/3); world sizes 1
and 2; fp32, precision "full"; every model, aggregation and optimizer, momentum, weight decay, clipping; automatic
and manual boundaries, step() after every backward or once per window, uneven windows; checkpoints; routed experts
and frozen parameters. Refused per run, with the reason (worker.Trial.check_supported): offload or experts with
ZeRO-0 (its torch.optim skips a parameter without gradient), a micro-batch reaching no trainable parameter, ranks
reaching different experts in one backward under ZeRO-1/2/3 (a hang in DeepSpeed), ZeRO-1/2 on two ranks with
0.18.9 (release.TWO_RANK_ZERO_FAILS). missing_gradient_is_zero: true (ZeRO's flat partitions step every trainable
parameter). Reports: applied gradient, grad norm and clip coefficient (null for ZeRO-0: DeepSpeed keeps no norm
there; the coefficient is DeepSpeed's rule applied to its norm, see worker.py), optimizer state.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from accumcheck_adapter.scenario import AGGREGATIONS, MODEL_KINDS, OPTIMIZERS  # noqa: E402

# Below accumcheck's --adapter-start-timeout (120 s) and --adapter-timeout (60 s): a worker start imports
# DeepSpeed (about 5-10 s on two busy cores) and warms up; a trial takes tens of milliseconds.
START_DEADLINE_S = 100.0
RUN_DEADLINE_S = 45.0

class DeepSpeedCapabilities(Capabilities):
    """The kit's capability check, except for optimizer.missing_gradient_is_zero. The flag in a scenario says which
    semantics its oracle follows; accumcheck takes that from the handshake (the oracle of an adapter target steps
    missing gradients as zeros when the capability says so) but sends the scenario as generated, with the flag
    false, and the kit's check would refuse every such request from an adapter that declares true. DeepSpeed's
    semantics are DeepSpeed's whatever the flag says, so the adapter runs the request as if it said true."""

    def check(self, request: RunRequest) -> None:
        o = request.scenario.optimizer
        if o.missing_gradient_is_zero != self.missing_gradient_is_zero:
            o = dataclasses.replace(o, missing_gradient_is_zero=self.missing_gradient_is_zero)
            request = dataclasses.replace(request, scenario=dataclasses.replace(request.scenario, optimizer=o))
        super().check(request)


CAPABILITIES = DeepSpeedCapabilities(
    models=MODEL_KINDS, experts=True, frozen_parameters=True, aggregations=AGGREGATIONS, optimizers=OPTIMIZERS,
    momentum=True, weight_decay=True, clipping=True, world_sizes=(1, 2), zero_stages=(0, 1, 2, 3),
    offload=(False, True), dtypes=("fp32",), precisions=("full", "bf16"), loss_scaling=False,
    boundary=("automatic", "manual"), step_after_every_backward=(True, False), uneven_windows=True,
    checkpoint=True,
    reports=Reports(applied_gradient=True, grad_norm=True, clip_coefficient=True, optimizer_state=True),
    missing_gradient_is_zero=True,
    limits=Limits(rank_count_max=2, step_count_max=16, micro_batch_count_max=16, token_count_max=1024))


class DeepSpeedGroup(WorkerGroup):
    """The worker.py processes of one world size (accumcheck_adapter.ranks), with the folder their checkpoints go
    to: one subfolder per run, removed after it."""

    def __init__(self, version: str, world_size: int) -> None:
        self.checkpoint_dir = Path(tempfile.mkdtemp(prefix=f"accumcheck-deepspeed-{version}-w{world_size}-"))

        def command(rank: int, port: int) -> list[str]:
            return [sys.executable, str(HERE / "worker.py"), "--version", version, "--rank", str(rank),
                    "--world-size", str(world_size), "--port", str(port), "--checkpoint-dir",
                    str(self.checkpoint_dir)]

        super().__init__(command, world_size, start_deadline_s=START_DEADLINE_S, run_deadline_s=RUN_DEADLINE_S,
                         cwd=HERE)

    def run(self, request: RunRequest) -> list[dict[str, Any]]:
        try:
            return super().run(request)
        finally:
            shutil.rmtree(self.checkpoint_dir / str(request.id), ignore_errors=True)

    def stop(self, kill: bool = False) -> None:
        super().stop(kill)
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)


class DeepSpeedAdapter(Adapter):
    def __init__(self, version: str) -> None:
        self.release = version
        self.name = f"deepspeed-{version}"
        self.version = version
        self.description = (f"the REAL DeepSpeed {version} (PyPI release, CPU accelerator, gloo): ZeRO-0/1/2/3, "
                            "CPU offload, world size 1-2")
        self.groups: dict[int, DeepSpeedGroup] = {}
        # The one-rank group starts now, behind the handshake: its import is most of a first run's time.
        self.group(1)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def group(self, world_size: int) -> DeepSpeedGroup:
        if world_size not in self.groups:
            self.groups[world_size] = DeepSpeedGroup(self.release, world_size)
        return self.groups[world_size]

    def run(self, request: RunRequest) -> Result:
        world_size = request.scenario.engine.rank_count
        stage = request.scenario.engine.zero_stage
        if world_size > 1 and stage in (1, 2) and self.release in release.TWO_RANK_ZERO_FAILS:
            raise Unsupported(release.TWO_RANK_ZERO_FAILS[self.release])
        group = self.group(world_size)
        start = time.monotonic()
        outcome, detail = "result", ""
        try:
            reply = group.run(request)[0]  # the ranks gather what they report: rank 0's result is the run's
        except WorkerFault as e:
            outcome, detail = "fault", str(e)[:300]
            group.stop(kill=True)
            del self.groups[world_size]
            raise
        except Exception as e:
            outcome, detail = type(e).__name__, str(e)[:300]
            raise
        finally:
            self.trace(request, outcome, detail, time.monotonic() - start)
        return Result.from_json(reply)

    def trace(self, request: RunRequest, outcome: str, detail: str, seconds: float) -> None:
        """ACCUMCHECK_DEEPSPEED_TRACE=FILE appends one line per run: how long it took and what it was (with the
        whole request when it failed)."""
        path = os.environ.get("ACCUMCHECK_DEEPSPEED_TRACE")
        if not path:
            return
        e = request.scenario.engine
        record = {"release": self.release, "id": request.id, "outcome": outcome, "detail": detail,
                  "seconds": round(seconds, 4),
                  "ranks": e.rank_count, "zero_stage": e.zero_stage, "offload": e.offload,
                  "steps": len(request.scenario.steps), "calls": len(request.calls)}
        if outcome not in ("result", "Unsupported"):
            record["request"] = request.to_json()  # to rerun it by hand
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        for g in self.groups.values():
            g.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="accumcheck adapter for a real DeepSpeed release")
    parser.add_argument("--version", required=True, help="the DeepSpeed release, X.Y.Z (scripts/deepspeed-env.sh)")
    args = parser.parse_args()
    if not release.installed(args.version):
        print(f"deepspeed adapter: DeepSpeed {args.version} is not installed in {release.release_dir(args.version)}"
              f": run ACCUMCHECK_DEEPSPEED_RELEASES={args.version} scripts/deepspeed-env.sh", file=sys.stderr)
        return 1
    adapter = DeepSpeedAdapter(args.version)
    try:
        return serve(adapter)
    finally:
        adapter.close()


if __name__ == "__main__":
    raise SystemExit(main())
