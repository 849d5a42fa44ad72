"""Loads one installed transformers release into this process (scripts/transformers-env.sh installs them).

Upstream code that runs: `import transformers` and `transformers.Trainer` of the release in
.venv/transformers/X.Y.Z (with the accelerate pinned beside it), on the torch of .venv/torch. Ours: where the
release is looked up, and the settings made before the import, each a documented switch of the libraries:
  - HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1: nothing is downloaded (the adapter builds its model from a config
    and passes no tokenizer); the hub would otherwise be asked at most for telemetry.
  - CUDA_VISIBLE_DEVICES="": the Trainer runs on CPU (use_cpu=True says so too); without it the CUDA torch wheel
    would probe for a GPU driver.
  - TOKENIZERS_PARALLELISM=false, TRANSFORMERS_NO_ADVISORY_WARNINGS=1: quiet logs, nothing else.
  - ACCELERATE_USE_CPU / DeepSpeed, FSDP and torch.compile variables are left unset, so accelerate's
    Accelerator takes its single-process CPU path (DistributedType.NO).
Run as a script, it is the import check of scripts/transformers-env.sh: prints the release's version.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

# adapters/transformers/release.py -> the repository root.
REPO_ROOT = Path(__file__).resolve().parents[2]


def venv_root() -> Path:
    """Where the releases are: ACCUMCHECK_VENV_DIR/transformers (as the C++ side reads it), else .venv/transformers."""
    base = os.environ.get("ACCUMCHECK_VENV_DIR")
    return (Path(base) if base else REPO_ROOT / ".venv") / "transformers"


def release_dir(version: str) -> Path:
    return venv_root() / version


def installed(version: str) -> bool:
    return (release_dir(version) / ".accumcheck-stamp").is_file()


def install_command(version: str) -> str:
    return f"ACCUMCHECK_TRANSFORMERS_RELEASES={version} scripts/transformers-env.sh"


def load_transformers(version: str, folder: Path | None = None, install: str | None = None) -> ModuleType:
    """Imports transformers `version` (and its Trainer) from its own folder (or from `folder`, a framework's folder
    that holds the transformers it pins, `install` its install command) and returns the module. Raises
    RuntimeError naming the install command when the release is missing, or when another transformers (or
    accelerate) was imported already."""
    folder = release_dir(version) if folder is None else folder
    install = install_command(version) if install is None else install
    if not (folder / "transformers" / "__init__.py").is_file():
        raise RuntimeError(f"transformers {version} is not installed in {folder}: run {install}")
    for name in ("transformers", "accelerate", "huggingface_hub"):
        if name in sys.modules:
            raise RuntimeError(f"a {name} module is imported already; one release per process")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
    sys.path.insert(0, str(folder))
    transformers = importlib.import_module("transformers")
    if transformers.__version__ != version:
        raise RuntimeError(f"{folder} holds transformers {transformers.__version__}, not {version}")
    for module in (transformers, importlib.import_module("accelerate")):
        if not str(Path(module.__file__).resolve()).startswith(str(folder.resolve())):
            raise RuntimeError(f"{module.__name__} was imported from {module.__file__}, not from {folder}")
    importlib.import_module("transformers.trainer")  # the Trainer and everything it imports
    transformers.logging.set_verbosity_error()
    return transformers


def deepspeed_release() -> ModuleType:
    """adapters/deepspeed/release.py (the DeepSpeed adapter's loader) under a name of its own: this folder has a
    release.py too. Importing it loads nothing."""
    ds_dir = REPO_ROOT / "adapters" / "deepspeed"
    if str(ds_dir) not in sys.path:
        sys.path.insert(0, str(ds_dir))  # ds_config.py and reading.py, which trainer_run imports
    if "deepspeed_release" in sys.modules:
        return sys.modules["deepspeed_release"]
    spec = importlib.util.spec_from_file_location("deepspeed_release", ds_dir / "release.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["deepspeed_release"] = module
    spec.loader.exec_module(module)
    return module


def load_deepspeed(version: str) -> ModuleType:
    """DeepSpeed `version` for the Trainer, imported as the DeepSpeed adapter imports it (the CPU accelerator and
    its settings, adapters/deepspeed/release.py), before transformers, so that the Trainer's
    is_deepspeed_available() finds it; and this process as rank 0 of a one-rank gloo group, which accelerate's
    DeepSpeed state initialises (deepspeed.init_distributed) from these variables. The port is 0: the group's store
    binds one the kernel picks (accumcheck_adapter.ranks.group_port says why)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      LOCAL_WORLD_SIZE="1")
    return deepspeed_release().load_deepspeed(version)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, help="the transformers release, X.Y.Z")
    args = parser.parse_args()
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # only the version goes to stdout
    transformers = load_transformers(args.version)
    import accelerate

    print(f"transformers {transformers.__version__}, accelerate {accelerate.__version__}, Trainer "
          f"{transformers.Trainer.__module__}", file=sys.stderr)
    print(transformers.__version__, file=real_stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
