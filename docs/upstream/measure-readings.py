"""Measures the three readings of docs/upstream/README.md on one DeepSpeed release (the numbers of its table).

Run from the accumcheck repository root, one release per process (X.Y.Z: any release in .venv/deepspeed):

    PYTHONPATH=.venv/deepspeed/X.Y.Z:.venv/deepspeed/_deps .venv/torch/bin/python docs/upstream/measure-readings.py \
        [SHAPE ...] [--stages 1,2] [--manual-boundary | --unmanaged] [--no-resume] [--json]

Shapes (scalar parameters, loss = sum of c * p over the parameters p a micro-batch uses; gradients are integers):
  ordinary-G3           G = 3, step() after every backward, one scalar a: 1, 10, 100 then 10^3, 10^4, 10^5
  multi-backward-G1-N3  G = 1, three backward() then one step() (boundary true on every backward), same numbers
  multi-backward-G1-N2  the same with two backwards: 1, 10 then 10^3, 10^4
  missing-grad-w2       G = 3, a and b; window 1 both everywhere; window 2 a misses micro-step 0, b the boundary
  missing-grad-both     G = 3, the same holes in both windows
Each runs uninterrupted and resumed (save_checkpoint after window 1, a fresh engine, load_checkpoint, window 2).
The applied gradient is read twice and the two must agree: the weight delta under SGD lr 1, and (ZeRO-1/2) an
optimizer step pre-hook on DeepSpeed's fp32 flat partition cut at each parameter's offset in its flat buffer.
Stage 3 is read through safe_get_full_fp32_param and has no pre-hook reading. One line per case, or JSON lines.
"""

import argparse
import gc
import json
import os
import sys
import tempfile
import time

# The three CPU settings of adapters/deepspeed/release.py, and rank 0 of 1 for DeepSpeed's gloo initialisation.
os.environ.update(DS_ACCELERATOR="cpu", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
for key, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT="29543").items():
    os.environ.setdefault(key, value)
sys.modules["triton"] = None
REPORT = sys.stdout
sys.stdout = sys.stderr  # DeepSpeed logs on stdout

import logging  # noqa: E402

import deepspeed  # noqa: E402
import deepspeed.ops  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # noqa: E402
from deepspeed.utils import safe_get_full_fp32_param  # noqa: E402

deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
ZERO_FIELDS = frozenset(DeepSpeedZeroConfig.model_fields)

W1, W2 = (1, 10, 100), (1000, 10000, 100000)
# shape: (parameter names, G, windows); a window is a list of micro-batches {name: gradient}.
SHAPES = {
    "ordinary-G3": (("a",), 3, [[{"a": c} for c in W1], [{"a": c} for c in W2]]),
    "multi-backward-G1-N3": (("a",), 1, [[{"a": c} for c in W1], [{"a": c} for c in W2]]),
    "multi-backward-G1-N2": (("a",), 1, [[{"a": c} for c in W1[:2]], [{"a": c} for c in W2[:2]]]),
    "missing-grad-w2": (("a", "b"), 3, [[{"a": c, "b": c} for c in W1],
                                         [{"b": 1000}, {"a": 10000, "b": 10000}, {"a": 100000}]]),
    "missing-grad-both": (("a", "b"), 3, [[{"b": 1}, {"a": 10, "b": 10}, {"a": 100}],
                                           [{"b": 1000}, {"a": 10000, "b": 10000}, {"a": 100000}]]),
}


class Scalars(torch.nn.Module):
    def __init__(self, names):
        super().__init__()
        for name in names:
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(1)))

    def forward(self, **c):
        return sum((getattr(self, name) * x).sum() for name, x in c.items())


def ds_config(g, stage, offload, unmanaged):
    """Every knob that touches accumulation pinned, as adapters/deepspeed/ds_config.py pins it."""
    zero = {"stage": stage}
    if stage > 0:
        zero.update(contiguous_gradients=True, overlap_comm=False, reduce_scatter=True, reduce_bucket_size=1024,
                    allgather_bucket_size=1024, round_robin_gradients=False, ignore_unused_parameters=True,
                    elastic_checkpoint=False, load_from_fp32_weights=True)
        if "compute_grad_norm" in ZERO_FIELDS:
            zero["compute_grad_norm"] = True
        if "parameter_alignment" in ZERO_FIELDS:
            zero["parameter_alignment"] = False
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False, "buffer_count": 4, "fast_init": False,
                                     "ratio": 1.0}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": g, "train_batch_size": g,
              "gradient_clipping": 0.0, "prescale_gradients": False, "gradient_predivide_factor": 1.0,
              "zero_optimization": zero, "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              "wall_clock_breakdown": False, "steps_per_print": 2**31 - 1}
    if unmanaged:
        config["managed_gradient_accumulation"] = False
    return config


class Run:
    """One engine over Scalars(names); step() reports what the optimizer applied."""

    def __init__(self, names, g, stage, offload, unmanaged):
        self.names, self.g, self.stage = names, g, stage
        self.model = Scalars(names)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=1.0)
        optimizer.register_step_pre_hook(self.capture)
        self.engine, *_ = deepspeed.initialize(model=self.model, optimizer=optimizer,
                                               config=ds_config(g, stage, offload, unmanaged))
        assert self.engine.gradient_clipping() == 0.0 and self.engine.gradient_accumulation_steps() == g
        self.offsets = {}  # name -> (flat group, element offset), ZeRO-1/2
        zero = self.engine.optimizer
        for i, flat in enumerate(getattr(zero, "bit16_groups_flat", []) if stage in (1, 2) else []):
            for p in zero.bit16_groups[i]:
                name = next(n for n, q in self.model.named_parameters() if q is p)
                self.offsets[name] = (i, (p.data_ptr() - flat.data_ptr()) // p.element_size())
        self.captured = None

    def capture(self, optimizer, args, kwargs):
        self.captured = [p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"]]

    def weights(self):
        params = {n: getattr(self.model, n) for n in self.names}
        if self.stage == 3:
            return {n: safe_get_full_fp32_param(p).item() for n, p in params.items()}
        return {n: p.item() for n, p in params.items()}

    def backward(self, micro_batch):
        self.engine.backward(self.engine(**{n: torch.tensor([float(c * self.g)]) for n, c in micro_batch.items()}))

    def step(self):
        """None if the optimizer did not step, else its applied gradient per name."""
        before, self.captured = self.weights(), None
        self.engine.step()
        if self.captured is None:
            return None
        after = self.weights()
        delta = {n: before[n] - after[n] for n in self.names}
        hook = {n: self.captured[i][o].item() for n, (i, o) in self.offsets.items()}
        if any(hook[n] != delta[n] for n in hook):
            raise RuntimeError(f"weight delta {delta} and pre-hook gradient {hook} disagree")
        norm = self.engine.get_global_grad_norm()
        return {"applied": delta, "grad_norm": None if norm is None else float(norm)}

    def destroy(self):
        if hasattr(self.engine, "destroy"):  # 0.16+
            self.engine.destroy()


def run_window(run, window, manual_boundary, unmanaged):
    """G > 1 (managed): step() after every backward; G = 1 or unmanaged: all backwards, then one step()."""
    stepped = []
    for k, micro_batch in enumerate(window):
        if manual_boundary:
            run.engine.set_gradient_accumulation_boundary(k == len(window) - 1)
        run.backward(micro_batch)
        if run.g > 1 and not unmanaged:
            stepped.append(run.step())
    if run.g == 1 or unmanaged:
        stepped.append(run.step())
    applied = [s for s in stepped if s is not None]
    if len(applied) != 1:
        raise RuntimeError(f"the optimizer stepped {len(applied)} times in one window")
    return applied[0]


def measure(shape, stage, offload, resume, manual_boundary, unmanaged, checkpoint_dir):
    names, g, windows = SHAPES[shape]
    run = Run(names, g, stage, offload, unmanaged)
    results = []
    for i, window in enumerate(windows):
        if resume and i == 1:
            run.engine.save_checkpoint(checkpoint_dir, tag="after-window-1")
            run.destroy()
            run = Run(names, g, stage, offload, unmanaged)
            path, _ = run.engine.load_checkpoint(checkpoint_dir, tag="after-window-1", load_optimizer_states=True,
                                                 load_lr_scheduler_states=False)
            assert path is not None
        results.append(run_window(run, window, manual_boundary, unmanaged))
    run.destroy()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", metavar="SHAPE", help=f"default: all of {', '.join(SHAPES)}")
    parser.add_argument("--stages", default="1,2", help="comma-separated ZeRO stages (0-3), default 1,2")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--manual-boundary", action="store_true", help="G = 1 shapes: boundary on the last backward")
    mode.add_argument("--unmanaged", action="store_true", help="managed_gradient_accumulation false (0.19.4+)")
    parser.add_argument("--no-resume", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    unknown = set(args.shapes) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shapes {sorted(unknown)}; known: {', '.join(SHAPES)}")
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    stages = [int(s) for s in args.stages.split(",")]
    configs = [(s, o) for s in stages for o in (False, True) if s > 0 or not o]
    checkpoint_dir = tempfile.mkdtemp(prefix=f"ds-{deepspeed.__version__}-")
    print(f"# deepspeed {deepspeed.__version__}, torch {torch.__version__}", file=REPORT)
    first = True
    for shape in args.shapes or SHAPES:
        names, _, windows = SHAPES[shape]
        correct = [{n: sum(m.get(n, 0) for m in w) for n in names} for w in windows]
        for stage, offload in configs:
            for resume in (False,) if args.no_resume else (False, True):
                start = time.monotonic()
                try:
                    result, error = measure(shape, stage, offload, resume, args.manual_boundary, args.unmanaged,
                                            checkpoint_dir), None
                except Exception as e:  # a release that raises is a result too
                    result, error = None, f"{type(e).__name__}: {e}"[:200]
                record = {"version": deepspeed.__version__, "shape": shape, "stage": stage, "offload": offload,
                          "resume": resume, "manual_boundary": args.manual_boundary, "unmanaged": args.unmanaged,
                          "correct": correct, "result": result, "error": error,
                          "seconds": round(time.monotonic() - start, 3)}
                if args.json:
                    print(json.dumps(record), file=REPORT, flush=True)
                else:
                    got = error or " ; ".join("/".join(f"{w['applied'][n]:g}" for n in names) for w in result)
                    want = " ; ".join("/".join(str(c[n]) for n in names) for c in correct)
                    print(f"{shape:21} ZeRO-{stage} offload {'on ' if offload else 'off'} "
                          f"{'resumed' if resume else 'straight'}: {got}   (correct {want})", file=REPORT,
                          flush=True)
                if first:  # DeepSpeed's initialize runs gc.collect(); freezing the warm-up objects makes it cheap
                    gc.collect()
                    gc.freeze()
                    first = False


if __name__ == "__main__":
    main()
