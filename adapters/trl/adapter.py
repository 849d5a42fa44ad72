"""trl: accumcheck drives the REAL TRL SFTTrainer of a pinned release on the transformers release it came out with,
over a real DeepSpeed release, with the ZeRO-2 accelerate config TRL documents and the optimizer offloaded to the CPU.

docs/trl-adapter.md says what is measured; docs/adapter-protocol.md is the protocol.

    adapter.py --version 0.12.2 --transformers 4.46.3 --deepspeed 0.16.4   (adapters/trl-0.12.2+deepspeed-0.16.4)
    adapter.py --version 0.12.2 --transformers 4.46.3 --deepspeed 0.16.4 --check   (scripts/trl-env.sh's check)

Upstream code that runs: TRL X.Y.Z and the libraries it brings (datasets, ...) as released on PyPI, installed
unmodified by scripts/trl-env.sh into .venv/trl/X.Y.Z/site-packages, on transformers T with its accelerate
(.venv/transformers/T), over DeepSpeed A.B.C (.venv/deepspeed), on torch 2.6.0, CPU, one rank:
  - the DeepSpeed setup: TRL's documentation (docs/source/deepspeed_integration.md) runs a training script with
    `accelerate launch --config_file examples/accelerate_configs/deepspeed_zero2.yaml`, the file 1.x also ships as
    trl/accelerate_configs/zero2.yaml (the same bytes at v0.12.2 and 1.14.2; ZERO2 below holds its fields, and
    the shipped file is checked against them where a release ships it). Offloading the optimizer is that file with
    `offload_optimizer_device: cpu` (accelerate reads every deepspeed_config field from the file, so a user edits
    it), run as `accelerate launch --config_file that.yaml --num_processes 1 --mixed_precision no` on one CPU
    process in fp32. accelerate's own launch code turns it into the environment the script runs in
    (launch_command_parser, _validate_launch_command, prepare_deepspeed_cmd_env: ACCELERATE_USE_DEEPSPEED,
    ACCELERATE_DEEPSPEED_ZERO_STAGE, ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE, ...), which this process takes
    instead of being started by torch.distributed.run. TrainingArguments then builds accelerate's DeepSpeedPlugin
    from it, and the Trainer fills its "auto" values (micro-batch 1, G, the clipping norm).
  - the trainer: `trl.SFTTrainer` with a `trl.SFTConfig`, given an already tokenized dataset
    (dataset_kwargs={"skip_prepare_dataset": True}, TRL's switch for that), a collator (TRL's users may pass
    their own) and a tokenizer as processing_class (else it would download one). 0.12.2's SFTTrainer keeps the
    Trainer's compute_loss. 1.14.2's takes the dataset only as a `datasets` Dataset (as_datasets), and its default
    loss_type, "chunked_nll", patches the model's LM head to compute the loss itself; the adapter sets the
    documented loss_type="nll" ("standard negative log-likelihood"), with which its compute_loss calls the
    Trainer's and then computes entropy and token accuracy from the outputs' logits, for logging.
  - everything trainer_run.py lists for the Trainer over DeepSpeed, and accelerate's optimizer swap: the plugin
    leaves zero_force_ds_cpu_optimizer at its default (true), so accelerate replaces the optimizer the Trainer was
    given by DeepSpeedCPUAdam over the same parameter groups, DeepSpeed's C++ CPU Adam (compiled by
    scripts/trl-env.sh): in AdamW mode whatever the optimizer under accelerate 1.1.1 (transformers 4.46.3's, in
    Accelerator._prepare_deepspeed), in the optimizer's own mode under 1.15.0 (map_pytorch_optim_to_deepspeed).
Ours: this process (the protocol, through the kit's serve), the loader, the one-entry WordLevel tokenizer built in
memory (nothing reads it: the dataset is tokenized), and what trainer_run.py names as ours (the model, the dataset
and its collator, the kit's Adam or AdamW handed to the Trainer through KitOptimizer, the reading of what the
optimizer consumed). For 1.14.2's metrics each row carries an attention_mask of ones and the model also returns
constant logits over a one-entry vocabulary, outside the loss and its graph.

Why 1.14.2 and not the newest: from 1.15.0 the SFTTrainer computes the loss itself under every loss_type ("nll" is
the default and "chunked_nll" its deprecated alias), as the negative log-likelihood of the labels from a fused LM
head it patches into the model (trl.trainer.utils.add_fused_lm_head: the backbone's last hidden state times the
output embeddings), so the model must be a causal language model; the synthetic models' per-token losses are not
log-probabilities, so 1.15.0 and later cannot run them (read in the 1.15.0 and 1.16.0 wheels).

Declared: what the Trainer over DeepSpeed declares (adapters/transformers/adapter.py), narrowed to what the config
fixes and what the optimizer swap keeps: ZeRO stage 2 with offload only, Adam and AdamW only (an SGD scenario would be
stepped as Adam, as under LLaMA-Factory's config: docs/llamafactory-adapter.md). Under accelerate 1.1.1 an Adam
scenario with weight decay is refused too (it would be stepped as AdamW); without weight decay the two modes of
DeepSpeedCPUAdam compute the same step.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import socket
import sys
import tempfile
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
    zero_stages=(2,), offload=(True,), dtypes=("fp32",), precisions=("full",), loss_scaling=False,
    boundary=("automatic", "manual"), step_after_every_backward=(True, False), uneven_windows=False,
    checkpoint=False,
    reports=Reports(applied_gradient=True, grad_norm=False, clip_coefficient=False, optimizer_state=True),
    missing_gradient_is_zero=True,
    limits=Limits(rank_count_max=1, step_count_max=16, micro_batch_count_max=16, token_count_max=1024))

# The fields of TRL's ZeRO-2 accelerate config (examples/accelerate_configs/deepspeed_zero2.yaml at v0.12.2, shipped
# as trl/accelerate_configs/zero2.yaml in 1.x: the same file).
ZERO2: dict[str, Any] = {
    "compute_environment": "LOCAL_MACHINE", "debug": False,
    "deepspeed_config": {"deepspeed_multinode_launcher": "standard", "offload_optimizer_device": "none",
                         "offload_param_device": "none", "zero3_init_flag": False, "zero_stage": 2},
    "distributed_type": "DEEPSPEED", "downcast_bf16": "no", "machine_rank": 0, "main_training_function": "main",
    "mixed_precision": "bf16", "num_machines": 1, "num_processes": 8, "rdzv_backend": "static",
    "same_network": True, "tpu_env": [], "tpu_use_cluster": False, "tpu_use_sudo": False, "use_cpu": False,
}


def venv_root() -> Path:
    """Where the releases are: ACCUMCHECK_VENV_DIR/trl (as the C++ side reads it), else .venv/trl."""
    base = os.environ.get("ACCUMCHECK_VENV_DIR")
    return ((Path(base) if base else release.REPO_ROOT / ".venv") / "trl").resolve()  # as DeepSpeed's


def release_dir(version: str) -> Path:
    return venv_root() / version


def installed(version: str) -> bool:
    return (release_dir(version) / ".accumcheck-stamp").is_file()


def install_command(version: str) -> str:
    return f"ACCUMCHECK_TRL_RELEASES={version} scripts/trl-env.sh"


def packages(version: str) -> Path:
    """The release's packages (scripts/trl-env.sh says why the folder is named site-packages)."""
    return release_dir(version) / "site-packages"


def as_datasets(items: Any) -> Any:
    """trainer_run's MicroBatchDataset as a `datasets` Dataset of the same rows, as torch tensors (1.x's SFTTrainer
    takes only a Dataset or IterableDataset)."""
    import datasets

    rows = [{k: v.tolist() for k, v in item.items()} for item in items.items]
    # Typed: inferred from rows that are all empty (micro-batches without a token), a column would be of nulls,
    # which the torch format hands back as lists.
    sequence = getattr(datasets, "List", None) or datasets.Sequence  # List since datasets 4.0
    features = datasets.Features({k: sequence(datasets.Value("int64")) for k in rows[0]})
    return datasets.Dataset.from_list(rows, features=features).with_format("torch")


def pairing_problem(version: str, transformers_version: str) -> str | None:
    """Why TRL `version` cannot run on transformers `transformers_version` by its own METADATA's requirement on
    transformers (0.12.2: < 4.47; 1.14.2: >= 4.56.2), or None."""
    from importlib.metadata import PathDistribution

    from packaging.requirements import Requirement
    from packaging.version import Version

    folder = packages(version)
    info = folder / f"trl-{release.deepspeed_release().pinned_version(folder, 'trl')}.dist-info"
    for line in PathDistribution(info).requires or []:
        requirement = Requirement(line)
        pinned = requirement.name == "transformers" and requirement.marker is None
        if pinned and Version(transformers_version) not in requirement.specifier:
            return (f"TRL {version} asks transformers{requirement.specifier}, not {transformers_version} "
                    "(scripts/trl-env.sh pairs each release with one)")
    return None


def load(version: str, transformers_version: str, deepspeed: str) -> ModuleType:
    """Imports DeepSpeed `deepspeed` (first, as the Trainer over DeepSpeed needs it), then transformers
    `transformers_version` from its folder with TRL `version` behind it, and the modules the adapter uses; returns
    the DeepSpeed module. Raises RuntimeError naming the install command when something is missing."""
    folder = packages(version)
    if not (folder / "trl" / "__init__.py").is_file():
        raise RuntimeError(f"TRL {version} is not installed in {folder}: run {install_command(version)}")
    # DeepSpeedCPUAdam's op, compiled by scripts/trl-env.sh, is looked up (and would be compiled) here.
    os.environ["TORCH_EXTENSIONS_DIR"] = str(release_dir(version) / "torch_extensions")
    ds = release.load_deepspeed(deepspeed)
    loader = release.deepspeed_release()  # adapters/deepspeed/release.py
    loader.remember_cpu_info()
    # Behind transformers' folder (load_transformers puts it first): TRL's folder holds no transformers, and its
    # older fsspec (requirements-0.12.2.txt) comes before the one of .venv/torch.
    sys.path.insert(0, str(folder))
    release.load_transformers(transformers_version)
    trl = importlib.import_module("trl")
    if not str(Path(trl.__file__).resolve()).startswith(str(folder.resolve())):
        raise RuntimeError(f"trl was imported from {trl.__file__}, not from {folder}")
    importlib.import_module("trl.trainer.sft_trainer")
    got = loader.pinned_version(folder, "trl")
    if got != version:
        raise RuntimeError(f"{folder} holds TRL {got}, not {version}")
    return ds


def zero2_offload_config(folder: Path) -> Path:
    """TRL's ZeRO-2 accelerate config with the optimizer offloaded to the CPU, written into `folder`; where the
    release ships the config, it must hold ZERO2's fields."""
    from importlib import resources

    import yaml

    try:
        shipped = resources.files("trl.accelerate_configs").joinpath("zero2.yaml")
        text = shipped.read_text() if shipped.is_file() else None
    except ModuleNotFoundError:  # 0.12.2 ships no accelerate configs (they are in its repository's examples/)
        text = None
    if text is not None and yaml.safe_load(text) != ZERO2:
        raise RuntimeError(f"TRL's shipped zero2.yaml is not the config this adapter was written for: {text}")
    config = json.loads(json.dumps(ZERO2))
    config["deepspeed_config"]["offload_optimizer_device"] = "cpu"
    path = folder / "zero2-offload.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def launch_environment(config: Path) -> dict[str, str]:
    """What `accelerate launch --config_file config --num_processes 1 --mixed_precision no script` puts in the
    script's environment beyond this one's, as accelerate's own launch code computes it (launch_command: the
    DeepSpeed branch, without starting torch.distributed.run)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    with socket.socket() as s:  # the port accelerate checks is free (nothing listens on it in one process)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["--config_file", str(config), "--num_processes", "1", "--mixed_precision", "no",
            "--main_process_port", str(port), "train.py"]
    args, defaults, mp_from_config_flag = _validate_launch_command(launch_command_parser().parse_args(argv))
    if not args.use_deepspeed or args.cpu:
        raise RuntimeError(f"accelerate launch does not take its DeepSpeed branch for {config.name}")
    # launch_command's lines for that branch
    fields = list(defaults.deepspeed_config.keys()) if defaults else []
    if mp_from_config_flag:
        fields.append("mixed_precision")
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)
    _, env = prepare_deepspeed_cmd_env(args)
    changed = {k: v for k, v in env.items() if os.environ.get(k) != v and k != "PYTHONPATH"}
    want = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2",
            "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu", "ACCELERATE_MIXED_PRECISION": "no"}
    wrong = {k: changed.get(k) for k, v in want.items() if changed.get(k) != v}
    if wrong:
        raise RuntimeError(f"accelerate launch set {wrong} for {config.name}, expected {want}")
    return changed


def tokenizer() -> Any:
    """The processing_class: a fast tokenizer over a one-entry vocabulary, built in memory (nothing reads it)."""
    import transformers
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"<pad>": 0}, unk_token="<pad>")), pad_token="<pad>",
        padding_side="right")


def make_framework(version: str) -> Any:
    """trainer_run's Framework for TRL `version` (imported by load)."""
    import torch
    import trainer_run
    from packaging.version import Version
    from trl import SFTConfig, SFTTrainer

    class TrlTrainer(trainer_run.KitOptimizer, SFTTrainer):
        """TRL's SFTTrainer with the kit's optimizer handed in (trainer_run.KitOptimizer) and the sequential
        sampler of trainer_run.SequentialTrainer."""

        _get_train_sampler = trainer_run.SequentialTrainer._get_train_sampler

    class Trl(trainer_run.Framework):
        name = f"TRL {version}"
        arguments_class = SFTConfig
        # 1.x's compute_loss reads the outputs' logits and the batch's attention_mask for its token metrics.
        language_model_outputs = Version(version) >= Version("1.0")

        def check_supported(self, request: RunRequest) -> None:
            s = request.scenario
            if s.optimizer.kind == "sgd":
                raise Unsupported("SGD: with the optimizer offloaded accelerate steps DeepSpeedCPUAdam in place of "
                                  "any torch optimizer (Accelerator._prepare_deepspeed)")
            decays = s.optimizer.kind == "adam" and s.optimizer.weight_decay != 0
            if decays and not trainer_run.accelerate_keeps_adam_mode():
                raise Unsupported("Adam with weight decay: this accelerate steps every optimizer as DeepSpeedCPUAdam "
                                  "in AdamW mode (its _prepare_deepspeed at DeepSpeed's default adamw_mode), Adam's "
                                  "L2 decay as decoupled decay")
            if s.engine.zero_stage != 2 or not s.engine.offload:
                raise Unsupported(f"ZeRO stage {s.engine.zero_stage}, offload {s.engine.offload}: TRL's zero2.yaml "
                                  "with offload_optimizer_device cpu fixes ZeRO-2 with the optimizer on CPU")

        def deepspeed_config(self, request: RunRequest) -> None:
            return None  # the accelerate launch environment carries it (launch_environment)

        def arguments(self) -> dict[str, Any]:
            fields = {"dataset_kwargs": {"skip_prepare_dataset": True}, "packing": False}
            if self.language_model_outputs:
                # 1.x's default, "chunked_nll", patches the model's LM head and computes the loss itself; "nll",
                # "standard negative log-likelihood", leaves it to the model through the Trainer's compute_loss.
                fields["loss_type"] = "nll"
            return fields

        def dataset(self, items: trainer_run.MicroBatchDataset) -> Any:
            return as_datasets(items) if self.language_model_outputs else items

        def trainer(self, **kwargs: Any) -> Any:
            return TrlTrainer(processing_class=tokenizer(), **kwargs)

        def check_stepped_optimizer(self, stepped: torch.optim.Optimizer, request: RunRequest) -> None:
            trainer_run.check_cpu_adam(stepped, request)

    return Trl()


class TrlAdapter(Adapter):
    def __init__(self, version: str, transformers_version: str, deepspeed: str) -> None:
        self.name = f"trl-{version}+deepspeed-{deepspeed}"
        self.description = (f"the REAL TRL {version} SFTTrainer (transformers {transformers_version}) over the REAL "
                            f"DeepSpeed {deepspeed} with TRL's ZeRO-2 accelerate config, optimizer offloaded "
                            "(PyPI releases, CPU, one process)")
        ds = load(version, transformers_version, deepspeed)
        import trainer_run

        self.config_dir = tempfile.TemporaryDirectory(prefix="accumcheck-trl-")
        config = zero2_offload_config(Path(self.config_dir.name))
        environment = launch_environment(config)
        os.environ.update(environment)
        trainer_run.DEEPSPEED = ds
        trainer_run.FRAMEWORK = make_framework(version)
        self.trainer_run = trainer_run
        # As the transformers adapter: one warm-up run, then gc.freeze() (adapters/transformers/adapter.py).
        trainer_run.run(trainer_run.zero2_offload_warm_up_request())
        gc.collect()
        gc.freeze()
        print(f"trl adapter: {json.dumps(trainer_run.describe())}, accelerate launch environment "
              f"{json.dumps(environment)}", file=sys.stderr)

    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def run(self, request: RunRequest) -> Result:
        start = time.monotonic()
        result = self.trainer_run.run(request)
        print(f"trl adapter: run {request.id} took {time.monotonic() - start:.3f} s", file=sys.stderr)
        return result

    def close(self) -> None:
        self.config_dir.cleanup()


def check(version: str, transformers_version: str, deepspeed: str) -> int:
    """scripts/trl-env.sh's import check: the release loads on its transformers over its DeepSpeed, the accelerate
    launch environment of the config is what the adapter expects, and DeepSpeedCPUAdam (compiled into
    TORCH_EXTENSIONS_DIR at first use) steps once as Adam. Prints the version."""
    with stdout_to_stderr():
        ds = load(version, transformers_version, deepspeed)
        import torch
        import transformers
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        with tempfile.TemporaryDirectory() as folder:
            environment = launch_environment(zero2_offload_config(Path(folder)))
        # rows as a `datasets` Dataset, as 1.x's runs hand them over (as_datasets): the library fingerprints them
        rows = as_datasets(SimpleNamespace(items=[{"index": torch.tensor([0]), "labels": torch.tensor([0, -100])},
                                                  {"index": torch.tensor([1]), "labels": torch.tensor([])}]))
        if rows[0]["labels"].tolist() != [0, -100] or not isinstance(rows[1]["labels"], torch.Tensor):
            raise RuntimeError(f"datasets rows came back as {rows[0]}, {rows[1]}")
        release.deepspeed_release().check_adam_step(DeepSpeedCPUAdam)
    print(f"TRL {version}, transformers {transformers.__version__}, DeepSpeed {ds.__version__}, accelerate launch "
          f"environment {environment}, CPU Adam built in {os.environ['TORCH_EXTENSIONS_DIR']}", file=sys.stderr)
    print(version)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="accumcheck adapter for the SFTTrainer of a real TRL release")
    parser.add_argument("--version", required=True, help="the TRL release, X.Y.Z (scripts/trl-env.sh)")
    parser.add_argument("--transformers", required=True, metavar="X.Y.Z",
                        help="the transformers release under it (scripts/transformers-env.sh)")
    parser.add_argument("--deepspeed", required=True, metavar="X.Y.Z",
                        help="the real DeepSpeed release under it (scripts/deepspeed-env.sh)")
    parser.add_argument("--check", action="store_true", help="the install check of scripts/trl-env.sh")
    args = parser.parse_args()
    for problem, command in (
            (not release.deepspeed_release().installed(args.deepspeed),
             f"DeepSpeed {args.deepspeed} is not installed: run ACCUMCHECK_DEEPSPEED_RELEASES={args.deepspeed} "
             "scripts/deepspeed-env.sh"),
            (not release.installed(args.transformers),
             f"transformers {args.transformers} is not installed: run {release.install_command(args.transformers)}")):
        if problem:
            print(f"trl adapter: {command}", file=sys.stderr)
            return 1
    if args.check:
        return check(args.version, args.transformers, args.deepspeed)
    if not installed(args.version):
        print(f"trl adapter: TRL {args.version} is not installed in {release_dir(args.version)}: run "
              f"{install_command(args.version)}", file=sys.stderr)
        return 1
    problem = pairing_problem(args.version, args.transformers) or release.deepspeed_release().op_problem(
        release_dir(args.version) / "torch_extensions", "cpu_adam", install_command(args.version))
    if problem is not None:
        print(f"trl adapter: {problem}", file=sys.stderr)
        return 1
    from accumcheck_adapter import deterministic_torch

    deterministic_torch()
    # As the LLaMA-Factory adapter (adapters/llamafactory/adapter.py): DeepSpeed's default gradient buckets under
    # accelerate's plugin are 5e8 elements, which torch.empty would fill with NaN under deterministic algorithms.
    import torch

    torch.utils.deterministic.fill_uninitialized_memory = False
    with stdout_to_stderr():  # importing and DeepSpeed's op loader (ninja) print; stdout is the protocol's
        adapter = TrlAdapter(args.version, args.transformers, args.deepspeed)
    try:
        return serve(adapter)
    finally:
        adapter.close()


if __name__ == "__main__":
    raise SystemExit(main())
