"""Loads one installed DeepSpeed release into this process (scripts/deepspeed-env.sh installs them).

Upstream code that runs: `import deepspeed` of the release in .venv/deepspeed/X.Y.Z, on the torch of .venv/torch,
with DeepSpeed's CPU accelerator. Ours: where the release is looked up, and three settings made before and
right after the import, each a path DeepSpeed itself takes on some machine:
  - DS_ACCELERATOR=cpu: DeepSpeed's documented override of its accelerator detection.
  - TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: torch.load as before torch 2.6, which 0.15.1's load_checkpoint needs.
  - `triton` made unimportable: the CUDA torch wheel ships triton, and 0.15.1 - 0.16.x import DeepSpeed's Triton
    inference kernels whenever triton imports, which fails without a GPU driver ("0 active drivers"). On a machine
    with the CPU torch wheel there is no triton and DeepSpeed takes its HAS_TRITON = False path; this is that path.
  - the shared-memory comm op (deepspeed_shm_comm, used by inference all-reduce only) marked incompatible in
    deepspeed.ops.__compatible_ops__, which is what DeepSpeed finds on a machine that cannot build it: the comm
    backend then starts without it instead of JIT-compiling it with g++ (about 75 s) at the first initialize.
Run as a script, it is the import check of scripts/deepspeed-env.sh: prints the release's version.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

# adapters/deepspeed/release.py -> the repository root.
REPO_ROOT = Path(__file__).resolve().parents[2]
SHM_COMM_OP = "deepspeed_shm_comm"


# Releases that cannot run ZeRO-1/2 on two ranks here, and why. Measured, and read in the source.
TWO_RANK_ZERO_FAILS = {
    "0.18.9": "DeepSpeed 0.18.9 cannot run ZeRO-1/2 on two ranks with the CPU accelerator and gloo: it flattens the "
              "parameters on the accelerator without .detach() (stage_1_and_2.py, 'Flattening param group on GPU'), "
              "so the partitions are autograd views and gloo's all_gather_into_tensor after the first step raises "
              "'Output 0 of SplitBackward0 is a view and is being modified inplace'; 0.19.0 added the .detach()",
}


# Releases whose ZeRO-1/2 without offload crash when some rank's partition holds no parameter (only padding), and
# why. Measured on 0.17.6 with two ranks and one or two trainable elements.
EMPTY_PARTITION_FAILS = {
    "0.17.6": "DeepSpeed 0.17.6 ZeRO-1/2 without offload raise IndexError when a rank's partition holds no "
              "parameter (get_flat_partition reads tensor_list[0] before the first step, code of PR #7509), and the "
              "other rank then waits in the norm's all_reduce; with two ranks that is every model of at most two "
              "trainable elements",
}


def venv_root() -> Path:
    """Where the releases are: ACCUMCHECK_VENV_DIR/deepspeed (as the C++ side reads it), else .venv/deepspeed, with
    symbolic links resolved: a C++ op DeepSpeed compiles (DeepSpeedCPUAdam's, adapters/llamafactory) is rebuilt
    whenever the source paths in its build file change, so a release must have one path however it is reached."""
    base = os.environ.get("ACCUMCHECK_VENV_DIR")
    return ((Path(base) if base else REPO_ROOT / ".venv") / "deepspeed").resolve()


def release_dir(version: str) -> Path:
    return venv_root() / version


def installed(version: str) -> bool:
    return (release_dir(version) / ".accumcheck-stamp").is_file()


def load_deepspeed(version: str) -> ModuleType:
    """Imports DeepSpeed `version` from its own folder and returns the module. Raises RuntimeError naming the
    install command when the release is missing, or when another DeepSpeed was imported already."""
    folder = release_dir(version)
    if not (folder / "deepspeed" / "__init__.py").is_file():
        raise RuntimeError(f"DeepSpeed {version} is not installed in {folder}: run "
                           f"ACCUMCHECK_DEEPSPEED_RELEASES={version} scripts/deepspeed-env.sh")
    if "deepspeed" in sys.modules:
        raise RuntimeError("a DeepSpeed module is imported already; one release per process")
    os.environ["DS_ACCELERATOR"] = "cpu"
    # torch 2.6 made torch.load(weights_only=True) the default; DeepSpeed 0.15.1's checkpoint engine calls
    # torch.load(path, map_location=...) on its own checkpoint files (which hold its config objects), and from
    # 0.16 on passes weights_only=False itself. This is torch's documented switch back to the old default, for
    # every release alike; only DeepSpeed's load_checkpoint of files this process just wrote reads it.
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    # DeepSpeed's CPU accelerator reads these for the local rank and size when they are set; a single process is
    # local rank 0 of 1 unless the caller set them.
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("LOCAL_SIZE", "1")
    sys.path[:0] = [str(folder), str(venv_root() / "_deps")]
    sys.modules["triton"] = None  # type: ignore[assignment]  # `import triton` raises ImportError
    deepspeed = importlib.import_module("deepspeed")
    if deepspeed.__version__ != version:
        raise RuntimeError(f"{folder} holds DeepSpeed {deepspeed.__version__}, not {version}")
    if not str(Path(deepspeed.__file__).resolve()).startswith(str(folder.resolve())):
        raise RuntimeError(f"deepspeed was imported from {deepspeed.__file__}, not from {folder}")
    importlib.import_module("deepspeed.ops").__compatible_ops__[SHM_COMM_OP] = False
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() != "cpu":
        raise RuntimeError(f"DeepSpeed {version} picked accelerator {get_accelerator().device_name()!r}, not cpu")
    # DeepSpeed logs every initialize at INFO on stdout; warnings and errors are what an adapter log should hold.
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    return deepspeed


def remember_cpu_info() -> None:
    """py-cpuinfo's get_cpu_info, asked once per process: DeepSpeedCPUAdam.__init__ calls it on every construction
    (once per run in the adapters over it: accelerate builds it in each Trainer's prepare under LLaMA-Factory,
    DeepSpeed in each initialize under OpenRLHF), only to warn about fp16 parameters on AMD CPUs, and each call
    starts a Python subprocess (1.3 s of a 1.5 s LLaMA-Factory run, measured). The answer cannot change within a
    process; nothing but the time differs. Call it after load_deepspeed."""
    import functools

    import cpuinfo
    from deepspeed.ops.adam import cpu_adam

    if not hasattr(cpuinfo.get_cpu_info, "cache_info"):
        cpuinfo.get_cpu_info = functools.cache(cpuinfo.get_cpu_info)
    if hasattr(cpu_adam, "get_cpu_info"):  # 0.19.x no longer asks
        cpu_adam.get_cpu_info = cpuinfo.get_cpu_info


def check_adam_step(optimizer_class: type) -> None:
    """Steps DeepSpeed's Adam op `optimizer_class` (DeepSpeedCPUAdam, FusedAdam: compiled into TORCH_EXTENSIONS_DIR
    at first use) once on a two-element parameter, or raises RuntimeError: the env scripts' check that the op built
    and computes Adam (adapters/llamafactory, adapters/openrlhf, adapters/trl)."""
    import torch

    p = torch.nn.Parameter(torch.ones(2))
    adam = optimizer_class([p], lr=0.5)
    p.grad = torch.tensor([1.0, -1.0])
    adam.step()
    # Adam's first step moves every element by lr (less an eps-sized amount)
    if not torch.allclose(p.detach(), torch.tensor([0.5, 1.5]), rtol=0, atol=1e-6):
        raise RuntimeError(f"{optimizer_class.__name__}'s first step gave {p.detach().tolist()}, expected [0.5, 1.5]")


def pinned_version(folder: Path, distribution: str) -> str:
    """The version of `distribution` installed in `folder` (its .dist-info), exactly one: how the adapters over
    DeepSpeed read what a framework's folder pins (adapters/llamafactory, adapters/openrlhf)."""
    found = [p.name[len(distribution) + 1:-len(".dist-info")] for p in folder.glob(f"{distribution}-*.dist-info")]
    if len(found) != 1:
        raise RuntimeError(f"{folder} holds {len(found)} {distribution} releases, expected one")
    return found[0]


def op_problem(extensions: Path, name: str, install: str) -> str | None:
    """Why DeepSpeed's C++ op `name` is not ready in TORCH_EXTENSIONS_DIR `extensions` for an adapter to load, or
    None. Only the env scripts build ops (`install` is the one to run): an adapter that compiled one (1-2 minutes)
    would miss accumcheck's start deadline and, killed meanwhile, leave torch's build lock behind, on which every
    later load waits for ever."""
    op = extensions / name
    if (op / "lock").exists():
        return f"{op / 'lock'} is left by an interrupted build of DeepSpeed's {name} op: remove {op} and run {install}"
    if not (op / f"{name}.so").is_file():
        return f"DeepSpeed's {name} op is not built in {op}: run {install}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, help="the DeepSpeed release, X.Y.Z")
    args = parser.parse_args()
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # DeepSpeed prints while importing; only the version goes to stdout
    deepspeed = load_deepspeed(args.version)
    print(deepspeed.__version__, file=real_stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
