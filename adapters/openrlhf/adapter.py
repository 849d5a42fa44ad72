"""openrlhf: accumcheck drives the REAL OpenRLHF SFT trainer of a pinned release over the real DeepSpeed release that
OpenRLHF release pins.

docs/openrlhf-adapter.md says what is measured; docs/adapter-protocol.md is the protocol.

    adapter.py --version 0.10.2 --deepspeed 0.18.9   (adapters/openrlhf-0.10.2+deepspeed-0.18.9/adapter.json)
    adapter.py --version 0.10.2 --deepspeed 0.18.9 --check   (scripts/openrlhf-env.sh's import check)

Upstream code that runs: OpenRLHF X.Y.Z with the transformers and libraries it pins, as released on PyPI, installed
unmodified by scripts/openrlhf-env.sh into .venv/openrlhf/X.Y.Z, over DeepSpeed A.B.C of .venv/deepspeed, on torch
2.6.0, CPU, one rank:
  - the command line: the `parser.add_argument` calls of the release's openrlhf/cli/train_sft.py (its parser is
    built inside `if __name__ == "__main__"`, so they are read from the file and run as written), given the flags
    a user would pass (cli_flags), and the release's `hierarchize` of the parsed namespace. One field is set after
    parsing, because the CLI cannot express it: ds.param_dtype = "fp32" (the flag offers bf16 and fp16 only; with
    neither, get_train_ds_config leaves both sections disabled).
  - the strategy: `get_strategy(args)`'s DeepspeedStrategy, its `setup_distributed` (deepspeed.init_distributed
    over gloo; the dp/sp/tp device mesh, built on "cpu" where the release asks for "cuda", and torch.cuda.set_device
    skipped: see cpu_distributed), `setup_dataloader` (OpenRLHF's DistributedSampler and torchdata's
    StatefulDataLoader), `prepare((model, cfg))` with cfg as train_sft.py builds it: `get_train_ds_config`,
    `get_optimizer_grouped_parameters` (bias and norm weights without weight decay), the scheduler factory
    (get_scheduler "cosine_with_min_lr", warm-up ratio 0 and min_lr_ratio 1: a constant learning rate) and
    `deepspeed.initialize(optimizer=None)`, so that DeepSpeed builds the optimizer from the config's AdamW section:
    DeepSpeedCPUAdam (adamw mode) with the optimizer offloaded, FusedAdam without, both DeepSpeed's C++ CPU ops
    (compiled by scripts/openrlhf-env.sh); `backward` and `optimizer_step` (engine.backward, engine.step).
  - the trainer: `SFTTrainer(...).fit(args, 0, windows)`, the accumulation loop: per micro-batch the model, the
    release's own loss (`SFTLoss`, token level; 0.10.3 with `get_loss_batch_info`, 0.10.4 through
    `iter_grad_accum_global_norm`), backward and step, logging through strategy.all_reduce; no evaluation, no
    checkpoint (eval.steps and ckpt.save_steps at the CLI's -1).
  - flash-attn 2.8.3's pure-Python modules (bert_padding, utils.distributed), which openrlhf.models imports; the
    package's __init__, which imports the CUDA kernels flash-attn was built without, is not run (flash_attn_modules).
Ours: this process (the protocol, through the kit's serve), the loader, the model (SyntheticModel, the kit's
synthetic model, whose forward returns the per-token losses of the micro-batch its row names; KitActor, OpenRLHF's
Actor with the release's __init__ and a forward that returns minus those losses as the per-token log-probabilities
SFTLoss negates: an Actor's own forward computes a log-softmax of logits, which no per-token loss of ours is), the
dataset (row j = micro-batch j, its tokens flattened: SFT's loss is a token mean, which does not see sequence
boundaries), one method of the strategy (CpuStrategy.all_reduce: the same reduction without the move to a CUDA
device, used for the progress bar's numbers only), and the reading of what the optimizer consumed (a step pre-hook
on the optimizer DeepSpeed built, adapters/transformers/trainer_run.StepReading).

Declared: fp32, one rank, ZeRO 0-2 (with offload at 1-2), the token mean, Adam or AdamW (DeepSpeed's AdamW;
Adam only without weight decay, where the two are the same update), G micro-batches per window, a step after every
backward with DeepSpeed's own boundary. Refused per run, with the reason: weight decay on a parameter OpenRLHF
exempts from it, a micro-batch that reaches no trainable parameter, and a micro-batch (0.10.2, 0.10.3) or window
(0.10.4) without a supervised token, whose token mean the release divides by 0 (NaN).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "transformers"))

import release  # noqa: E402  (adapters/transformers/release.py)
from accumcheck_adapter import (  # noqa: E402
    Adapter,
    Capabilities,
    Limits,
    Reports,
    Result,
    RunRequest,
    Unsupported,
    serve,
    stdout_to_stderr,
)
from accumcheck_adapter.scenario import MODEL_KINDS  # noqa: E402

CAPABILITIES = Capabilities(
    models=MODEL_KINDS, experts=True, frozen_parameters=True, aggregations=("token-mean",),
    optimizers=("adam", "adamw"), momentum=False, weight_decay=True, clipping=True, world_sizes=(1,),
    zero_stages=(0, 1, 2), offload=(False, True), dtypes=("fp32",), precisions=("full",), loss_scaling=False,
    boundary=("automatic",), step_after_every_backward=(True,), uneven_windows=False, checkpoint=False,
    reports=Reports(applied_gradient=True, grad_norm=False, clip_coefficient=False, optimizer_state=True),
    missing_gradient_is_zero=True,
    limits=Limits(rank_count_max=1, step_count_max=16, micro_batch_count_max=16, token_count_max=1024))

# The scope whose supervised-token count each release divides a micro-batch's loss sum by (docs/upstream-notes.md
# section 2): the micro-batch on its rank (0.10.2), the micro-batch on every rank (0.10.3: get_loss_batch_info's
# all-reduce), the whole window on every rank (0.10.4: iter_grad_accum_global_norm). An empty scope is 0/0.
COUNT_SCOPE = {"0.10.2": "micro-batch", "0.10.3": "micro-batch on every rank", "0.10.4": "window on every rank"}


def venv_root() -> Path:
    """Where the releases are: ACCUMCHECK_VENV_DIR/openrlhf (as the C++ side reads it), else .venv/openrlhf."""
    base = os.environ.get("ACCUMCHECK_VENV_DIR")
    return ((Path(base) if base else release.REPO_ROOT / ".venv") / "openrlhf").resolve()  # as DeepSpeed's


def release_dir(version: str) -> Path:
    return venv_root() / version


def ops_dir(deepspeed: str) -> Path:
    """TORCH_EXTENSIONS_DIR of the releases over DeepSpeed `deepspeed`: its Adam ops (scripts/openrlhf-env.sh)."""
    return venv_root() / "_ops" / deepspeed


def installed(version: str) -> bool:
    return (release_dir(version) / ".accumcheck-stamp").is_file()


def install_command(version: str) -> str:
    return f"ACCUMCHECK_OPENRLHF_RELEASES={version} scripts/openrlhf-env.sh"


def ops_problem(version: str, deepspeed: str) -> str | None:
    """Why DeepSpeed's Adam ops are not ready for an adapter to load (release.py's op_problem), or None."""
    for name in ("cpu_adam", "fused_adam"):
        problem = release.deepspeed_release().op_problem(ops_dir(deepspeed), name, install_command(version))
        if problem is not None:
            return problem
    return None


def flash_attn_modules(folder: Path) -> None:
    """Makes `flash_attn` importable as the package folder of the release's flash-attn without running its
    __init__.py, which imports flash_attn_interface and so the CUDA extension flash_attn_2_cuda that a build with
    FLASH_ATTENTION_SKIP_CUDA_BUILD does not have. Its submodules (bert_padding, utils.distributed: pure Python,
    what openrlhf.models.ring_attn_utils imports) then load from their files, unmodified; importing
    flash_attn.flash_attn_interface still fails as it does on any machine without the kernels."""
    spec = importlib.util.find_spec("flash_attn")
    if spec is None or spec.submodule_search_locations is None:
        raise RuntimeError(f"flash-attn is not installed in {folder}: run {install_command(folder.name)}")
    if not str(Path(spec.origin).resolve()).startswith(str(folder.resolve())):
        raise RuntimeError(f"flash_attn would be imported from {spec.origin}, not from {folder}")
    sys.modules["flash_attn"] = importlib.util.module_from_spec(spec)


def load(version: str, deepspeed: str) -> ModuleType:
    """Imports DeepSpeed `deepspeed` (first, as OpenRLHF imports it at module level), then OpenRLHF `version` with
    the transformers it pins from its folder, and the modules the adapter uses; returns deepspeed. Raises
    RuntimeError naming the install command when something is missing."""
    folder = release_dir(version)
    if not (folder / "openrlhf" / "__init__.py").is_file():
        raise RuntimeError(f"OpenRLHF {version} is not installed in {folder}: run {install_command(version)}")
    # DeepSpeed's Adam ops, compiled by scripts/openrlhf-env.sh, are looked up (and would be compiled) here.
    os.environ["TORCH_EXTENSIONS_DIR"] = str(ops_dir(deepspeed))
    ds = release.load_deepspeed(deepspeed)  # and this process as rank 0 of a one-rank gloo group
    loader = release.deepspeed_release()  # adapters/deepspeed/release.py
    loader.remember_cpu_info()
    release.load_transformers(loader.pinned_version(folder, "transformers"), folder, install_command(version))
    flash_attn_modules(folder)
    openrlhf = importlib.import_module("openrlhf")
    if not str(Path(openrlhf.__file__).resolve()).startswith(str(folder.resolve())):
        raise RuntimeError(f"openrlhf was imported from {openrlhf.__file__}, not from {folder}")
    for name in ("openrlhf.models", "openrlhf.trainer.sft_trainer", "openrlhf.utils", "openrlhf.utils.config",
                 "openrlhf.utils.deepspeed.deepspeed"):
        importlib.import_module(name)
    got = loader.pinned_version(folder, "openrlhf")
    if got != version:
        raise RuntimeError(f"{folder} holds OpenRLHF {got}, not {version}")
    return ds


def sft_parser(folder: Path) -> argparse.ArgumentParser:
    """The release's train_sft.py command-line parser: the statements of its `if __name__ == "__main__":` block
    that build it (`parser = argparse.ArgumentParser()` and every `parser.add_argument(...)`), run as written."""
    path = folder / "openrlhf" / "cli" / "train_sft.py"
    tree = ast.parse(path.read_text(), str(path))
    blocks = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'"]
    if len(blocks) != 1:
        raise RuntimeError(f"{path} has {len(blocks)} `if __name__ == '__main__'` blocks, expected one")
    wanted = []
    for node in blocks[0].body:
        call = node.value if isinstance(node, ast.Assign | ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        func = ast.unparse(call.func)
        if (isinstance(node, ast.Assign) and func == "argparse.ArgumentParser") or func == "parser.add_argument":
            wanted.append(node)
    namespace: dict[str, Any] = {"argparse": argparse, "datetime": datetime.datetime}
    exec(compile(ast.Module(wanted, []), str(path), "exec"), namespace)  # the release's own statements
    parser = namespace.get("parser")
    if not isinstance(parser, argparse.ArgumentParser) or len(wanted) < 20:
        raise RuntimeError(f"{path}: found {len(wanted)} parser statements, not the SFT command line")
    return parser


def cli_flags(request: RunRequest) -> list[str]:
    """The train_sft.py flags of the scenario's run, as a user would pass them on one rank."""
    s = request.scenario
    o, e = s.optimizer, s.engine
    flags = ["--train.micro_batch_size", "1", "--train.batch_size", str(e.accumulation_steps * e.rank_count),
             "--train.max_epochs", "1", "--ds.zero_stage", str(e.zero_stage),
             "--adam.lr", repr(float(o.lr)), "--adam.betas", repr(float(o.beta1)), repr(float(o.beta2)),
             "--adam.eps", repr(float(o.eps)), "--adam.weight_decay", repr(float(o.weight_decay)),
             "--lr_scheduler", "cosine_with_min_lr", "--lr_warmup_ratio", "0", "--min_lr_ratio", "1",
             "--max_norm", "0" if s.max_grad_norm is None else repr(float(s.max_grad_norm))]
    if e.offload:
        flags.append("--ds.adam_offload")
    return flags


def make_run(version: str, ds: ModuleType) -> Any:
    """The run function over the loaded release (load)."""
    import reading
    import torch
    import trainer_run
    from accumcheck_adapter import StepReport, build_model
    from accumcheck_adapter.result import parameter_report
    from openrlhf.models import Actor
    from openrlhf.trainer.sft_trainer import SFTTrainer
    from openrlhf.utils import get_strategy
    from openrlhf.utils.config import hierarchize
    from openrlhf.utils.deepspeed import deepspeed as strategy_module
    from openrlhf.utils.deepspeed.deepspeed_utils import get_optimizer_grouped_parameters
    from openrlhf.utils.utils import zero_pad_sequences
    from torch import distributed as dist
    from torch import nn

    trainer_run.DEEPSPEED = ds  # StepReading reads ZeRO-1/2's flat partitions
    parser = sft_parser(release_dir(version))

    class SyntheticModel(nn.Module):
        """The kit's synthetic model, called as OpenRLHF calls a causal LM: row [k, 0, ..., 0] of `sequences` is
        micro-batch k; the output is its per-token losses l_t, one row."""

        def __init__(self, synthetic: nn.Module, micro_batches: list[Any]) -> None:
            super().__init__()
            self.synthetic = synthetic
            self.micro_batches = micro_batches
            self.seen: list[int] = []

        def forward(self, sequences: torch.Tensor, attention_mask: Any = None, position_ids: Any = None) -> Any:
            if sequences.shape[0] != 1:
                raise RuntimeError(f"the trainer passed {sequences.shape[0]} rows; micro_batch_size is 1")
            k = int(sequences[0, 0])
            self.seen.append(k)
            return self.synthetic(self.micro_batches[k]).reshape(1, -1)

    class KitActor(Actor):
        """OpenRLHF's Actor around SyntheticModel (the release's __init__, which keeps a module as self.model), with
        a forward that returns -l_t as the per-token log-probabilities, shaped as Actor.forward's (one fewer than
        the row's length), and the output when asked, as the trainer calls it."""

        def forward(self, sequences: torch.Tensor, attention_mask: Any = None, return_output: bool = False,
                    return_logprobs: bool = False, ring_attn_group: Any = None, **kwargs: Any) -> Any:
            if kwargs or ring_attn_group is not None or not return_logprobs:
                raise RuntimeError(f"the trainer called the actor with {sorted(kwargs)}, ring_attn_group "
                                   f"{ring_attn_group}, return_logprobs {return_logprobs}: not SFT's call")
            log_probs = -self.model(sequences, attention_mask=attention_mask)
            return (log_probs, {"logits": None}) if return_output else log_probs

    class CpuStrategy(strategy_module.DeepspeedStrategy):
        """The release's strategy with all_reduce's move of CPU tensors to torch.cuda.current_device() left out
        (the same sum, mean or max over the group). SFTTrainer.fit calls it for the progress bar's numbers only."""

        def all_reduce(self, data: Any, op: str = "mean") -> Any:
            if isinstance(data, dict):
                return {k: self.all_reduce(v, op) for k, v in data.items()}
            tensor = data if isinstance(data, torch.Tensor) else torch.tensor([float(data)])
            if op == "mean":
                tensor = tensor / self.world_size
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
            return tensor if isinstance(data, torch.Tensor) else tensor.item()

    def cpu_distributed(strategy: Any) -> None:
        """strategy.setup_distributed() as the release runs it, on CPU: torch.cuda.set_device (called because
        LOCAL_RANK is set) selects no device, and init_device_mesh, which the release calls with "cuda", builds
        the same mesh on "cpu" (gloo). Both are restored afterwards."""
        real_mesh, real_set_device = strategy_module.init_device_mesh, torch.cuda.set_device
        asked: list[str] = []

        def cpu_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
            asked.append(device_type)
            return real_mesh("cpu", *args, **kwargs)

        strategy_module.init_device_mesh, torch.cuda.set_device = cpu_mesh, lambda _device: None
        try:
            strategy.setup_distributed()
        finally:
            strategy_module.init_device_mesh, torch.cuda.set_device = real_mesh, real_set_device
        if asked != ["cuda"]:
            raise RuntimeError(f"setup_distributed asked for device meshes on {asked}, expected one on cuda")

    class GroupStepReading(trainer_run.StepReading):
        """StepReading where DeepSpeed built the optimizer over OpenRLHF's parameter groups (decayed, and exempt
        from decay). ZeRO-1/2 step it once per group with param_groups narrowed to that group (stage_1_and_2.py,
        _optimizer_step), each group's fp32 gradient set (and clipped) just before its own step and, without
        offload, freed right after: so each call is read for its own group's partition, and a window's reading is
        its groups' calls together, each group once. ZeRO-0 steps the optimizer once, over every group."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.pending: dict[int, dict[str, Any]] = {}

        def before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
            layout = self.zero_layout()
            if layout is None:
                super().before_step(optimizer, args, kwargs)
                return
            stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
            now = [i for i, (part, _, _) in enumerate(layout) if id(part) in stepped]
            if len(now) != 1 or len(stepped) != 1 or now[0] in self.pending:
                raise RuntimeError(f"ZeRO stepped partitions {now} of {len(layout)} together, after "
                                   f"{sorted(self.pending)} in this window: not one group per call")
            part, entries, partition = layout[now[0]]
            grad = part.grad
            self.pending[now[0]] = {
                e.name: None if grad is None else e.cut(grad.detach().float(), partition, 1).tolist() for e in entries}
            if len(self.pending) == len(layout):
                gradient = {name: None for name, _ in self.named}
                for piece in self.pending.values():
                    gradient.update(piece)
                self.applied.append(gradient)
                self.pending = {}
                for name, p in self.named:
                    if p.requires_grad:
                        self.step_counts[name] += 1

    def rows(micro_batches: list[Any]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Row j: inputs [j, 0, ..., 0] (one more than micro-batch j's N tokens, as a causal LM's inputs are one
        longer than its log-probabilities), attention mask all ones, loss mask the tokens' loss_mask then 0: the
        trainer's loss_mask[:, :-1] is the micro-batch's mask."""
        out = []
        for j, seqs in enumerate(micro_batches):
            mask = [int(m) for seq in seqs for m in seq.loss_mask]
            inputs = torch.zeros(1, len(mask) + 1, dtype=torch.long)
            inputs[0, 0] = j
            # float32, as SFTDataset.get_loss_mask makes it
            out.append((inputs, torch.ones_like(inputs), torch.tensor([[*mask, 0]], dtype=torch.float32)))
        return out

    class Rows(torch.utils.data.Dataset):
        def __init__(self, items: list[Any]) -> None:
            self.items = items

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, j: int) -> Any:
            return self.items[j]

    def collate(batch: list[Any]) -> Any:
        """SFTDataset.collate_fn's padding (zero_pad_sequences, right), of one row."""
        if len(batch) != 1:
            raise RuntimeError(f"the dataloader collated {len(batch)} rows; micro_batch_size is 1")
        return tuple(zero_pad_sequences([item[i] for item in batch], "right") for i in range(3))

    def check_supported(request: RunRequest, synthetic: nn.Module, micro_batches: list[Any]) -> None:
        s = request.scenario
        e, o = s.engine, s.optimizer
        if e.rank_count != 1:
            raise Unsupported(f"{e.rank_count} ranks: this adapter runs OpenRLHF on one rank")
        for w, window in enumerate(s.steps):
            if len(window) != e.accumulation_steps:
                raise Unsupported(f"window {w} has {len(window)} micro-batches, G = {e.accumulation_steps}")
        if s.aggregation.mode != "token-mean":
            raise Unsupported(f"aggregation {s.aggregation.mode!r}: OpenRLHF's SFT loss is a token mean")
        if s.checkpoint_after_step is not None:
            raise Unsupported("checkpoints: OpenRLHF's checkpoint resume is not driven by this adapter")
        if e.precision != "full":
            raise Unsupported(f"precision {e.precision!r}: this adapter runs OpenRLHF in fp32")
        if o.kind == "sgd":
            raise Unsupported("SGD: OpenRLHF's DeepSpeed config has an AdamW section (or Muon), no SGD")
        if o.kind == "adam" and o.weight_decay != 0:
            raise Unsupported("Adam with weight decay: OpenRLHF's optimizer is DeepSpeed's AdamW (decoupled decay)")
        refusal = reading.engine_refusal(s)
        if refusal is not None:
            raise Unsupported(refusal)
        if o.weight_decay != 0:
            exempt = [n for n, p in synthetic.named_parameters() if p.requires_grad
                      and any(p is q for q in get_optimizer_grouped_parameters(synthetic, 1.0)[1]["params"])]
            if exempt:
                raise Unsupported(f"weight decay with parameters {exempt}: OpenRLHF exempts them from weight decay "
                                  "(get_optimizer_grouped_parameters), the scenario decays every parameter")
        g = e.accumulation_steps
        for j, seqs in enumerate(micro_batches):
            if not any(len(seq.loss_mask) for seq in seqs):
                # Its row would be one input long, which the trainer's squeeze(1) collapses (0.10.4's window count
                # then raises IndexError); a tokenised SFT sample has at least two tokens.
                raise Unsupported(f"micro-batch {j % g} of window {j // g} has no token: an SFT row is at least two "
                                  "tokens long")
            if not synthetic(seqs).requires_grad:
                raise Unsupported(f"micro-batch {j % g} of window {j // g} reaches no trainable parameter: "
                                  "DeepSpeed's backward would raise on a loss without a graph")
        scope = COUNT_SCOPE[version]
        for w, window in enumerate(s.steps):
            counts = [sum(seq.valid_token_count for seq in ranks[0]) for ranks in window]
            empty = [k for k, c in enumerate(counts) if c == 0]
            if empty and (scope != "window on every rank" or len(empty) == len(counts)):
                where = f"micro-batch {empty[0]} of window {w}" if scope != "window on every rank" else f"window {w}"
                raise Unsupported(f"{where} has no supervised token: OpenRLHF {version} divides its loss by the "
                                  f"{scope}'s token count, 0/0 = NaN")

    def check_optimizer(stepped: Any, request: RunRequest) -> None:
        """DeepSpeed built the optimizer OpenRLHF's config asks for, with the scenario's hyperparameters."""
        from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam

        o, e = request.scenario.optimizer, request.scenario.engine
        want_type = DeepSpeedCPUAdam if e.offload else FusedAdam
        if type(stepped) is not want_type:
            raise RuntimeError(f"DeepSpeed steps {type(stepped).__name__}, expected {want_type.__name__}")
        mode = stepped.adam_w_mode if hasattr(stepped, "adam_w_mode") else None
        if mode is not True and mode != 1:
            raise RuntimeError(f"{type(stepped).__name__} has adam_w_mode {mode}, expected AdamW")
        for i, group in enumerate(stepped.param_groups):
            got = {"lr": group["lr"], "betas": tuple(group["betas"]), "eps": group["eps"],
                   "bias_correction": group.get("bias_correction")}
            want = {"lr": float(o.lr), "betas": (float(o.beta1), float(o.beta2)), "eps": float(o.eps),
                    "bias_correction": True}
            if got != want:
                raise RuntimeError(f"{type(stepped).__name__} group {i} has {got}, the scenario {want}")
            if group["weight_decay"] not in (float(o.weight_decay), 0.0):
                raise RuntimeError(f"group {i} has weight decay {group['weight_decay']}, the scenario "
                                   f"{float(o.weight_decay)}")

    def run(request: RunRequest) -> Result:
        s = request.scenario
        dtype = {"fp32": torch.float32}[request.dtype]
        micro_batches = [ranks[0] for window in s.steps for ranks in window]
        synthetic = build_model(s.model, s.initial_parameters, dtype)
        check_supported(request, synthetic, micro_batches)
        args = hierarchize(parser.parse_args(cli_flags(request)))
        args.ds.param_dtype = "fp32"  # not a CLI choice (bf16, fp16): see the module docstring
        strategy = get_strategy(args)
        strategy.__class__ = CpuStrategy
        cpu_distributed(strategy)
        if strategy.accumulated_gradient != s.engine.accumulation_steps:
            raise RuntimeError(f"the strategy accumulates {strategy.accumulated_gradient} micro-batches, G = "
                               f"{s.engine.accumulation_steps}")
        for p in synthetic.parameters():  # the DeepSpeed adapter's gradient layout hook (reading.py)
            if p.requires_grad:
                p.register_hook(reading.canonical_layout)
        model = SyntheticModel(synthetic, micro_batches)
        actor = KitActor(model)
        # train_sft.py's setup_dataloader(dataset, micro_batch_size, True, True, collate_fn): pin_memory off (no
        # device to pin for) and shuffle off, so that row j of the epoch is micro-batch j.
        dataloader = strategy.setup_dataloader(Rows(rows(micro_batches)), 1, False, False, collate)
        cfg = {"optim": args.optim, "muon": vars(args.muon), "adam": vars(args.adam), "lr_scheduler": args.lr_scheduler,
               "lr_warmup_ratio": args.lr_warmup_ratio, "min_lr_ratio": args.min_lr_ratio, "max_norm": args.max_norm,
               "scheduler_steps": len(s.steps)}
        actor, optimizer, scheduler = strategy.prepare((actor, cfg))
        engine = actor.model
        import ds_config

        reading.check_engine(engine, ds_config.expected_engine_state(s))
        stepped = engine.optimizer if s.engine.zero_stage == 0 else engine.optimizer.optimizer
        check_optimizer(stepped, request)
        named = [(name.removeprefix("synthetic."), p) for name, p in model.named_parameters()]
        observer = GroupStepReading(request, named, stepped)
        observer.trainer = SimpleNamespace(deepspeed=engine)
        lrs: list[list[float]] = []
        observer.hooks.append(stepped.register_step_pre_hook(
            lambda o, _a, _k: lrs.append([g["lr"] for g in o.param_groups])))
        trainer = SFTTrainer(model=actor, strategy=strategy, optim=optimizer, train_dataloader=dataloader,
                             eval_dataloader=None, scheduler=scheduler, max_norm=args.max_norm, pretrain_mode=False,
                             batch_size=args.train.batch_size, max_epochs=args.train.max_epochs)
        trainer.fit(args, 0, len(s.steps))
        for hook in observer.hooks:
            hook.remove()
        if model.seen != list(range(len(micro_batches))):
            raise RuntimeError(f"the trainer ran micro-batches {model.seen}, expected 0..{len(micro_batches) - 1} "
                               "in order")
        if observer.pending or len(observer.applied) != len(s.steps) or engine.global_steps != len(s.steps):
            raise RuntimeError(f"DeepSpeed stepped the optimizer {len(observer.applied)} times, "
                               f"{len(observer.pending)} groups left over (global_steps {engine.global_steps}) for "
                               f"{len(s.steps)} windows")
        if any(lr != float(s.optimizer.lr) for step in lrs for lr in step):
            raise RuntimeError(f"the scheduler's learning rates were {lrs}, not the constant {float(s.optimizer.lr)}")
        reports = [StepReport(True, gradient, None, None) for gradient in observer.applied]
        result = Result(reports, parameter_report(named), observer.optimizer_state())
        if hasattr(engine, "destroy"):
            engine.destroy()
        return result

    return run


class OpenRLHFAdapter(Adapter):
    def __init__(self, version: str, deepspeed: str) -> None:
        self.name = f"openrlhf-{version}+deepspeed-{deepspeed}"
        self.version = version
        self.description = (f"the REAL OpenRLHF {version} SFT trainer over the REAL DeepSpeed {deepspeed} (PyPI "
                            "releases, CPU, one rank, fp32)")
        ds = load(version, deepspeed)
        self.run_request = make_run(version, ds)
        import transformers

        print(f"openrlhf adapter: OpenRLHF {version}, transformers {transformers.__version__}, DeepSpeed "
              f"{ds.__version__}, ops in {os.environ['TORCH_EXTENSIONS_DIR']}", file=sys.stderr)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def run(self, request: RunRequest) -> Result:
        start = time.monotonic()
        result = self.run_request(request)
        print(f"openrlhf adapter: run {request.id} took {time.monotonic() - start:.3f} s", file=sys.stderr)
        return result


def check(version: str, deepspeed: str) -> int:
    """scripts/openrlhf-env.sh's import check: the release loads over its DeepSpeed, its SFT parser builds, and
    DeepSpeed's two Adam ops (compiled into TORCH_EXTENSIONS_DIR at first use) step once. Prints the version."""
    with stdout_to_stderr():
        ds = load(version, deepspeed)
        parser = sft_parser(release_dir(version))
        args = parser.parse_args([])
        from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam

        for cls in (DeepSpeedCPUAdam, FusedAdam):
            release.deepspeed_release().check_adam_step(cls)
        import transformers

        report = (f"OpenRLHF {version}, transformers {transformers.__version__}, DeepSpeed {ds.__version__}, "
                  f"train_sft.py's parser ({len(vars(args))} options), Adam ops built in "
                  f"{os.environ['TORCH_EXTENSIONS_DIR']}")
    print(report, file=sys.stderr)
    print(version)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="accumcheck adapter for the SFT trainer of a real OpenRLHF release")
    parser.add_argument("--version", required=True, choices=sorted(COUNT_SCOPE),
                        help="the OpenRLHF release (scripts/openrlhf-env.sh)")
    parser.add_argument("--deepspeed", required=True, metavar="X.Y.Z",
                        help="the real DeepSpeed release under it (scripts/deepspeed-env.sh)")
    parser.add_argument("--check", action="store_true", help="the install check of scripts/openrlhf-env.sh")
    args = parser.parse_args()
    if not release.deepspeed_release().installed(args.deepspeed):
        print(f"openrlhf adapter: DeepSpeed {args.deepspeed} is not installed: run "
              f"ACCUMCHECK_DEEPSPEED_RELEASES={args.deepspeed} scripts/deepspeed-env.sh", file=sys.stderr)
        return 1
    if args.check:
        return check(args.version, args.deepspeed)
    if not installed(args.version):
        print(f"openrlhf adapter: OpenRLHF {args.version} is not installed in {release_dir(args.version)}: run "
              f"{install_command(args.version)}", file=sys.stderr)
        return 1
    problem = ops_problem(args.version, args.deepspeed)
    if problem is not None:
        print(f"openrlhf adapter: {problem}", file=sys.stderr)
        return 1
    from accumcheck_adapter import deterministic_torch

    deterministic_torch()
    # As the LLaMA-Factory adapter (adapters/llamafactory/adapter.py): with deterministic algorithms on, torch.empty
    # fills every new tensor with NaN, and DeepSpeed's config models drop get_train_ds_config's "auto" values
    # (config_utils.py), so reduce_bucket_size is its 5e8-element default, a 2 GB fp32 bucket per engine, one engine
    # per run: the fill took about 9 s of a 10 s ZeRO-2 run (measured; 0.1 s without).
    import torch

    torch.utils.deterministic.fill_uninitialized_memory = False
    with stdout_to_stderr():  # importing and DeepSpeed's op loader (ninja) print; stdout is the protocol's
        adapter = OpenRLHFAdapter(args.version, args.deepspeed)
    return serve(adapter)


if __name__ == "__main__":
    raise SystemExit(main())
