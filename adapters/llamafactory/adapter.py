"""llamafactory: accumcheck drives the REAL LLaMA-Factory trainer of a pinned release over a real DeepSpeed release,
with the ZeRO-2 CPU-offload DeepSpeed config that release's own code writes.

docs/llamafactory-adapter.md says what is measured; docs/adapter-protocol.md is the protocol.

    adapter.py --version 0.9.3 --deepspeed 0.16.4   (adapters/llamafactory-0.9.3+deepspeed-0.16.4/adapter.json)
    adapter.py --version 0.9.3 --deepspeed 0.16.4 --check   (scripts/llamafactory-env.sh's import check)

Upstream code that runs: LLaMA-Factory X.Y.Z with the transformers, accelerate and libraries it pins, as released on
PyPI, installed unmodified by scripts/llamafactory-env.sh into .venv/llamafactory/X.Y.Z, over DeepSpeed A.B.C of
.venv/deepspeed, on torch 2.6.0, CPU, one rank:
  - the DeepSpeed config: `llamafactory.webui.common.create_ds_config()`, which the release's Web UI calls at start
    and whose ds_z2_offload_config.json (in its DEFAULT_CACHE_DIR: cache/ in 0.9.3, llamaboard_cache/ in 0.9.5) its
    runner hands to training as `deepspeed` when the user picks ZeRO-2 with offload (llamafactory/webui/runner.py).
    It is run once per adapter process in a temporary folder and the file is handed to the Trainer by path, as the
    Web UI does. Every "auto" in it is filled by the Trainer's own HfTrainerDeepSpeedConfig from the
    TrainingArguments (micro-batch 1, G, the clipping norm, fp16 and bf16 off). The repository's
    examples/deepspeed/ds_z2_offload_config.json differs from 0.9.3's writer only in overlap_comm (false there, true
    in 0.9.3's writer, false in 0.9.5's) and two logging sections.
  - the trainer: `llamafactory.train.sft.trainer.CustomSeq2SeqTrainer` (the SFT stage's trainer, a
    Seq2SeqTrainer), built with LLaMA-Factory's own `llamafactory.hparams.TrainingArguments` and
    `FinetuningArguments(stage="sft", finetuning_type="full", disable_shuffling=True)`: disable_shuffling is
    LLaMA-Factory's own switch to a SequentialSampler (its _get_train_sampler). No processor (a text model), so
    model_accepts_loss_kwargs stays the Trainer's. Its create_optimizer (create_custom_optimizer: None for full
    fine-tuning without GaLore, APOLLO, BAdam, Adam-mini or Muon) and create_scheduler run.
  - everything trainer_run.py lists for the Trainer over DeepSpeed (the accumulation loop, the count, accelerate,
    DeepSpeed's engine and ZeRO-2 optimizer with offload), and accelerate's `map_pytorch_optim_to_deepspeed`:
    the config leaves zero_force_ds_cpu_optimizer at its default (true), so accelerate replaces the optimizer the
    Trainer was given by DeepSpeedCPUAdam over the same parameter groups (their lr, betas, eps, weight decay;
    adamw_mode for a torch AdamW), DeepSpeed's C++ CPU Adam (compiled by scripts/llamafactory-env.sh).
Ours: this process (the protocol, through the kit's serve), the loader (TORCH_EXTENSIONS_DIR and the release
transformers/release.py loads), and what trainer_run.py names as ours (the model, dataset, collator, the kit's
Adam or AdamW handed to the Trainer through KitOptimizer, the reading of what the optimizer consumed).

Declared: what the Trainer over DeepSpeed declares (adapters/transformers/adapter.py), narrowed to what LLaMA-Factory's
config fixes and what its optimizer swap keeps: ZeRO stage 2 with offload only, Adam and AdamW only. SGD is
refused per run: accelerate would step an SGD scenario with Adam (map_pytorch_optim_to_deepspeed maps every torch
optimizer but Adagrad and bitsandbytes' Lion to DeepSpeedCPUAdam), which is a finding about the optimizer, not
about accumulation (docs/llamafactory-adapter.md).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
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
    zero_stages=(2,), offload=(True,), dtypes=("fp32",), precisions=("full",), loss_scaling=False,
    boundary=("automatic", "manual"), step_after_every_backward=(True, False), uneven_windows=False,
    checkpoint=False,
    reports=Reports(applied_gradient=True, grad_norm=False, clip_coefficient=False, optimizer_state=True),
    missing_gradient_is_zero=True,
    limits=Limits(rank_count_max=1, step_count_max=16, micro_batch_count_max=16, token_count_max=1024))


def venv_root() -> Path:
    """Where the releases are: ACCUMCHECK_VENV_DIR/llamafactory (as the C++ side reads it), else .venv/llamafactory."""
    base = os.environ.get("ACCUMCHECK_VENV_DIR")
    return ((Path(base) if base else release.REPO_ROOT / ".venv") / "llamafactory").resolve()  # as DeepSpeed's


def release_dir(version: str) -> Path:
    return venv_root() / version


def installed(version: str) -> bool:
    return (release_dir(version) / ".accumcheck-stamp").is_file()


def install_command(version: str) -> str:
    return f"ACCUMCHECK_LLAMAFACTORY_RELEASES={version} scripts/llamafactory-env.sh"


def load(version: str, deepspeed: str) -> tuple[ModuleType, ModuleType]:
    """Imports DeepSpeed `deepspeed` (first, as the Trainer over DeepSpeed needs it), then LLaMA-Factory `version`
    with the transformers it pins from its folder, and the modules the adapter uses; returns (llamafactory,
    deepspeed). Raises RuntimeError naming the install command when something is missing."""
    folder = release_dir(version)
    if not (folder / "llamafactory" / "__init__.py").is_file():
        raise RuntimeError(f"LLaMA-Factory {version} is not installed in {folder}: run {install_command(version)}")
    # DeepSpeedCPUAdam's op, compiled by scripts/llamafactory-env.sh, is looked up (and would be compiled) here.
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder / "torch_extensions")
    ds = release.load_deepspeed(deepspeed)
    loader = release.deepspeed_release()  # adapters/deepspeed/release.py
    loader.remember_cpu_info()
    release.load_transformers(loader.pinned_version(folder, "transformers"), folder, install_command(version))
    llamafactory = importlib.import_module("llamafactory")
    if not str(Path(llamafactory.__file__).resolve()).startswith(str(folder.resolve())):
        raise RuntimeError(f"llamafactory was imported from {llamafactory.__file__}, not from {folder}")
    for name in ("llamafactory.train.sft.trainer", "llamafactory.hparams", "llamafactory.webui.common"):
        importlib.import_module(name)
    got = loader.pinned_version(folder, "llamafactory")
    if got != version:
        raise RuntimeError(f"{folder} holds LLaMA-Factory {got}, not {version}")
    return llamafactory, ds


def webui_zero2_offload_config(folder: Path) -> Path:
    """Runs the release's create_ds_config() with `folder` as the working directory and returns the ZeRO-2 offload
    config it wrote there (DEFAULT_CACHE_DIR/ds_z2_offload_config.json, the file its Web UI runner hands to
    training)."""
    from llamafactory.webui import common

    previous = os.getcwd()
    os.chdir(folder)
    try:
        common.create_ds_config()
    finally:
        os.chdir(previous)
    path = folder / common.DEFAULT_CACHE_DIR / "ds_z2_offload_config.json"
    config = json.loads(path.read_text())
    zero = config.get("zero_optimization", {})
    if zero.get("stage") != 2 or zero.get("offload_optimizer", {}).get("device") != "cpu":
        raise RuntimeError(f"LLaMA-Factory's {path.name} is not ZeRO-2 with the optimizer on CPU: {zero}")
    return path


def make_framework(version: str, config_path: Path) -> Any:
    """trainer_run's Framework for LLaMA-Factory `version` (imported by load)."""
    import torch
    import trainer_run
    from llamafactory.hparams import FinetuningArguments, TrainingArguments
    from llamafactory.train.sft.trainer import CustomSeq2SeqTrainer

    class LlamaFactoryTrainer(trainer_run.KitOptimizer, CustomSeq2SeqTrainer):
        """LLaMA-Factory's SFT trainer with the kit's optimizer handed in (trainer_run.KitOptimizer)."""

    class LlamaFactory(trainer_run.Framework):
        name = f"LLaMA-Factory {version}"
        arguments_class = TrainingArguments

        def check_supported(self, request: RunRequest) -> None:
            s = request.scenario
            if s.optimizer.kind == "sgd":
                raise Unsupported("SGD: under LLaMA-Factory's offload config accelerate steps DeepSpeedCPUAdam in "
                                  "place of any torch optimizer (map_pytorch_optim_to_deepspeed)")
            if s.engine.zero_stage != 2 or not s.engine.offload:
                raise Unsupported(f"ZeRO stage {s.engine.zero_stage}, offload {s.engine.offload}: LLaMA-Factory's "
                                  "ds_z2_offload_config.json fixes ZeRO-2 with the optimizer on CPU")

        def deepspeed_config(self, request: RunRequest) -> str:
            return str(config_path)

        def trainer(self, **kwargs: Any) -> Any:
            finetuning = FinetuningArguments(stage="sft", finetuning_type="full", disable_shuffling=True)
            return LlamaFactoryTrainer(finetuning_args=finetuning, processor=None, tokenizer=None, **kwargs)

        def check_stepped_optimizer(self, stepped: torch.optim.Optimizer, request: RunRequest) -> None:
            trainer_run.check_cpu_adam(stepped, request)

    return LlamaFactory()


class LlamaFactoryAdapter(Adapter):
    def __init__(self, version: str, deepspeed: str) -> None:
        self.name = f"llamafactory-{version}+deepspeed-{deepspeed}"
        self.version = version
        self.description = (f"the REAL LLaMA-Factory {version} SFT trainer over the REAL DeepSpeed {deepspeed} with "
                            "its ZeRO-2 offload config (PyPI releases, CPU, one process)")
        _, ds = load(version, deepspeed)
        import trainer_run

        self.config_dir = tempfile.TemporaryDirectory(prefix="accumcheck-llamafactory-")
        config_path = webui_zero2_offload_config(Path(self.config_dir.name))
        trainer_run.DEEPSPEED = ds
        trainer_run.FRAMEWORK = make_framework(version, config_path)
        self.trainer_run = trainer_run
        # As the transformers adapter: one warm-up run, then gc.freeze() (adapters/transformers/adapter.py).
        trainer_run.run(trainer_run.zero2_offload_warm_up_request())
        gc.collect()
        gc.freeze()
        print(f"llamafactory adapter: {json.dumps(trainer_run.describe())}, DeepSpeed config {config_path.name}: "
              f"{config_path.read_text()}", file=sys.stderr)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def run(self, request: RunRequest) -> Result:
        start = time.monotonic()
        result = self.trainer_run.run(request)
        print(f"llamafactory adapter: run {request.id} took {time.monotonic() - start:.3f} s", file=sys.stderr)
        return result

    def close(self) -> None:
        self.config_dir.cleanup()


def check(version: str, deepspeed: str) -> int:
    """scripts/llamafactory-env.sh's import check: the release loads over its DeepSpeed, its config writer runs,
    and DeepSpeedCPUAdam (compiled into TORCH_EXTENSIONS_DIR at first use) steps once as Adam. Prints the version."""
    with stdout_to_stderr():
        report = checked(version, deepspeed)
    print(report, file=sys.stderr)
    print(version)
    return 0


def checked(version: str, deepspeed: str) -> str:
    """check()'s work; returns what it found, in words."""
    _, ds = load(version, deepspeed)
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    with tempfile.TemporaryDirectory() as folder:
        webui_zero2_offload_config(Path(folder))
    release.deepspeed_release().check_adam_step(DeepSpeedCPUAdam)
    import transformers

    return (f"LLaMA-Factory {version}, transformers {transformers.__version__}, DeepSpeed {ds.__version__}, "
            f"CPU Adam built in {os.environ['TORCH_EXTENSIONS_DIR']}")


def main() -> int:
    parser = argparse.ArgumentParser(description="accumcheck adapter for the trainer of a real LLaMA-Factory release")
    parser.add_argument("--version", required=True,
                        help="the LLaMA-Factory release, X.Y.Z (scripts/llamafactory-env.sh)")
    parser.add_argument("--deepspeed", required=True, metavar="X.Y.Z",
                        help="the real DeepSpeed release under it (scripts/deepspeed-env.sh)")
    parser.add_argument("--check", action="store_true", help="the install check of scripts/llamafactory-env.sh")
    args = parser.parse_args()
    if not release.deepspeed_release().installed(args.deepspeed):
        print(f"llamafactory adapter: DeepSpeed {args.deepspeed} is not installed: run "
              f"ACCUMCHECK_DEEPSPEED_RELEASES={args.deepspeed} scripts/deepspeed-env.sh", file=sys.stderr)
        return 1
    if args.check:
        return check(args.version, args.deepspeed)
    if not installed(args.version):
        print(f"llamafactory adapter: LLaMA-Factory {args.version} is not installed in {release_dir(args.version)}: "
              f"run {install_command(args.version)}", file=sys.stderr)
        return 1
    problem = release.deepspeed_release().op_problem(release_dir(args.version) / "torch_extensions", "cpu_adam",
                                                     install_command(args.version))
    if problem is not None:
        print(f"llamafactory adapter: {problem}", file=sys.stderr)
        return 1
    from accumcheck_adapter import deterministic_torch

    deterministic_torch()
    # With deterministic algorithms on, torch.empty also fills every new tensor with NaN (a documented switch,
    # torch.utils.deterministic.fill_uninitialized_memory). LLaMA-Factory's config asks for 5e8-element gradient
    # buckets (reduce_bucket_size, allgather_bucket_size with contiguous_gradients: 2 GB each in fp32), which
    # DeepSpeed allocates per engine, one engine per run: the fill took 13 s of a 15 s run (measured). Off, a run
    # takes about 0.1 s; memory DeepSpeed read before writing would still show, as a wrong result.
    import torch

    torch.utils.deterministic.fill_uninitialized_memory = False
    with stdout_to_stderr():  # importing and DeepSpeed's op loader (ninja) print; stdout is the protocol's
        adapter = LlamaFactoryAdapter(args.version, args.deepspeed)
    try:
        return serve(adapter)
    finally:
        adapter.close()


if __name__ == "__main__":
    raise SystemExit(main())
