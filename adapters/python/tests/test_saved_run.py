"""saved_run.py, the stdlib-only reader of the configuration inside torch.save files, as `accumcheck audit` runs it: a
subprocess of the system python3 (/usr/bin/python3, which has no torch) on files written here with the real
torch.save, by the real DeepSpeed's save_checkpoint and the real Trainer's save_model where those are installed.

The safety tests feed it pickles that run a command when unpickled for real (os.system, builtins.eval, a
__setstate__ of the pickled class, through each opcode that reaches a callable: GLOBAL, STACK_GLOBAL, INST, OBJ,
REDUCE, BUILD, EXT1; NEWOBJ and NEWOBJ_EX are exercised by plain instances) and assert the command did not run: the
marker file it would create does not exist. Each payload has a canary that loads the same kind of bytes with pickle
or torch.load and sees its marker appear, so a payload that would not have run anyway cannot pass for a safe reader.
"""

from __future__ import annotations

import ast
import builtins
import collections
import copyreg
import dataclasses
import enum
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import ADAPTERS, HAS_TORCH, requires_torch

if HAS_TORCH:
    import torch

SCRIPT = ADAPTERS / "python" / "src" / "accumcheck_adapter" / "saved_run.py"
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else shutil.which("python3") or sys.executable
DS_CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
             "bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8},
             "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95]}}, "steps_per_print": 10}


def _module(name: str, path: Path) -> Any:
    """The module in `path` under a name of its own: adapters/deepspeed and adapters/transformers both have a
    release.py (importing one loads no framework), and saved_run is the very file accumcheck audit runs."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


saved_run = _module("saved_run_under_test", SCRIPT)
deepspeed_release = _module("saved_run_deepspeed_release", ADAPTERS / "deepspeed" / "release.py")
transformers_release = _module("saved_run_transformers_release", ADAPTERS / "transformers" / "release.py")


def run_reader(path: Path | str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SYSTEM_PYTHON, *flags, str(SCRIPT), str(path)], capture_output=True, text=True,
                          timeout=60, check=False)


def read(path: Path, *flags: str) -> dict[str, Any]:
    """The JSON object the reader writes for `path`, which it must accept."""
    done = run_reader(path, *flags)
    assert (done.returncode, done.stderr) == (0, ""), done
    out = json.loads(done.stdout)
    assert out["file"] == str(path)
    return out


def refused(path: Path | str) -> str:
    """The one-line message the reader writes for `path`, which it must refuse with exit status 2."""
    done = run_reader(path)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"saved_run.py: {path}: "), lines[0]
    return lines[0]


def torch_zip(path: Path, data_pkl: bytes, name: str = "archive") -> Path:
    """A zip laid out as torch.save lays one out, around a pickle of our own making."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/data.pkl", data_pkl)
        archive.writestr(f"{name}/byteorder", "little")
        archive.writestr(f"{name}/version", "3\n")
    return path


def model_states(ds_config: Any = None, ds_version: Any = "0.16.4") -> dict[str, Any]:
    """The dict DeepSpeedEngine._save_checkpoint saves (engine.py, _common_checkpoint_state), with small tensors."""
    return {"module": collections.OrderedDict(weight=torch.arange(6.0).reshape(3, 2), bias=torch.zeros(3)),
            "buffer_names": [], "optimizer": None, "param_shapes": None, "frozen_param_shapes": None,
            "shared_params": None, "frozen_param_fragments": None, "lr_scheduler": None, "data_sampler": None,
            "random_ltd": None, "sparse_tensor_module_names": set(), "skipped_steps": 0, "global_steps": 10,
            "global_samples": 80, "dp_world_size": 1, "mp_world_size": 1,
            "ds_config": DS_CONFIG if ds_config is None else ds_config, "ds_version": ds_version}


# -- A stand-in TrainingArguments, for the cases a real one cannot be built here (a deepspeed path with no DeepSpeed
# installed, a subclass, a nested dataclass); its fields and enums are shaped and pickled as transformers' are.


class IntervalStrategy(str, enum.Enum):  # transformers.trainer_utils.IntervalStrategy, an ExplicitEnum
    NO = "no"
    STEPS = "steps"
    EPOCH = "epoch"


@dataclasses.dataclass
class AcceleratorConfig:
    split_batches: bool = False
    even_batches: bool = True


@dataclasses.dataclass
class TrainingArguments:
    output_dir: str
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    bf16: bool = False
    fp16: bool = False
    deepspeed: str | dict[str, Any] | None = None
    average_tokens_across_devices: bool = False
    save_strategy: IntervalStrategy = IntervalStrategy.STEPS
    local_rank: int = -1
    hub_token: str | None = None
    push_to_hub_token: str | None = None
    accelerator_config: AcceleratorConfig = dataclasses.field(default_factory=AcceleratorConfig)
    _n_gpu: int = 0


@dataclasses.dataclass
class SFTConfig(TrainingArguments):  # TRL's configs subclass TrainingArguments under names of their own
    max_seq_length: int = 1024


# -- Payloads: objects whose unpickling runs something.


class Reduce:
    """Pickles as a call of `func` with `args`: what unpickling it for real runs."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


class TouchOnSetState:
    """Runs its own code in BUILD: unpickling it for real touches `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).touch()


class WithNewArgsEx:
    """Pickles with NEWOBJ_EX (protocol 4): positional and keyword arguments to __new__, then BUILD."""

    def __new__(cls, *args: Any, **kwargs: Any) -> WithNewArgsEx:
        return super().__new__(cls)

    def __init__(self, size: int, *, tag: str) -> None:
        self.size, self.tag = size, tag

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.size,), {"tag": self.tag}


def system_payload(marker: Path) -> Reduce:
    return Reduce(os.system, f"touch {marker}")


def eval_payload(marker: Path) -> Reduce:
    return Reduce(builtins.eval, f"open({str(marker)!r}, 'w').close()")


PAYLOADS = {"os.system": system_payload, "builtins.eval": eval_payload, "__setstate__": TouchOnSetState}


# -- DeepSpeed model-states files.


@requires_torch
@pytest.mark.parametrize(("folder", "name"), [("global_step10", "mp_rank_00_model_states.pt"),
                                              ("global_step10", "zero_pp_rank_0_mp_rank_00_model_states.pt")])
def test_a_model_states_file_gives_the_ds_config_and_version(tmp_path, folder, name):
    path = tmp_path / folder / name
    path.parent.mkdir()
    torch.save(model_states(), path)
    out = read(path)
    assert out == {"file": str(path), "format": "deepspeed-model-states", "ds_config": DS_CONFIG,
                   "ds_version": "0.16.4", "dp_world_size": 1}


@requires_torch
def test_a_ds_config_saved_as_the_path_it_was_given_is_that_path(tmp_path):
    # Before DeepSpeed 0.18.6, engine.config was the config as deepspeed.initialize was given it: a path, if a path.
    path = tmp_path / "mp_rank_00_model_states.pt"
    torch.save(model_states(ds_config="configs/ds_zero2.json"), path)
    assert read(path)["ds_config"] == "configs/ds_zero2.json"


@requires_torch
def test_the_legacy_format_of_torch_before_1_6_is_read(tmp_path):
    path = tmp_path / "mp_rank_00_model_states.pt"
    torch.save(model_states(), path, _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(path)
    assert read(path) == {"file": str(path), "format": "deepspeed-model-states", "ds_config": DS_CONFIG,
                          "ds_version": "0.16.4", "dp_world_size": 1}


@requires_torch
def test_an_optimizer_states_file_is_a_torch_save_with_the_config(tmp_path):
    # DeepSpeedEngine._save_zero_checkpoint: dict(optimizer_state_dict=..., ds_config=self.config, ds_version=...)
    path = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"optimizer_state_dict": {"state": {0: {"exp_avg": torch.ones(2)}}}, "ds_config": DS_CONFIG,
                "ds_version": "0.19.8"}, path)
    assert read(path) == {"file": str(path), "format": "torch-save", "ds_config": DS_CONFIG, "ds_version": "0.19.8"}


@requires_torch
def test_values_without_a_json_form_are_named_strings(tmp_path):
    path = tmp_path / "mp_rank_00_model_states.pt"
    loop: list[Any] = []
    loop.append(loop)
    config = {"tensor": torch.ones(2), "dtype": torch.bfloat16, "device": torch.device("cuda", 1),
              "inf": float("inf"), "-inf": float("-inf"), "nan": float("nan"), "big": 2**100, "bytes": b"abc",
              "tuple": (1, 2), "set": {3, 1, 2}, "ordered": collections.OrderedDict(b=1, a=2), "int keys": {1: "x"},
              "loop": loop, "strategy": IntervalStrategy.EPOCH}
    torch.save(model_states(ds_config=config), path)
    assert read(path)["ds_config"] == {
        "tensor": "<torch tensor>", "dtype": "<object torch.bfloat16>", "device": "cuda:1", "inf": "inf",
        "-inf": "-inf", "nan": "nan", "big": "<int of 101 bits>", "bytes": "<bytes 3>", "tuple": [1, 2],
        "set": [1, 2, 3], "ordered": {"b": 1, "a": 2}, "int keys": {"1": "x"}, "loop": ["<cycle>"],
        "strategy": "epoch"}


@requires_torch
def test_an_instance_keeps_its_class_its_arguments_and_its_state(tmp_path):
    path = tmp_path / "mp_rank_00_model_states.pt"
    torch.save(model_states(ds_config={"x": WithNewArgsEx(3, tag="t")}), path, pickle_protocol=4)
    assert read(path)["ds_config"]["x"] == {"__class__": "test_saved_run.WithNewArgsEx", "args": [3],
                                            "kwargs": {"tag": "t"}, "state": {"size": 3, "tag": "t"}}


@requires_torch
@pytest.mark.parametrize(("version", "stage"), [("0.16.4", 0), ("0.19.8", 3)])
def test_a_real_deepspeed_checkpoint(tmp_path, version, stage):
    """DeepSpeed's own engine.save_checkpoint, one CPU rank (deepspeed.initialize on gloo, as adapters/deepspeed
    runs it): the model-states file, and with ZeRO-3 the optimizer-states file beside it."""
    if not deepspeed_release.installed(version):
        pytest.skip(f"DeepSpeed {version} is not installed: run ACCUMCHECK_DEEPSPEED_RELEASES={version} "
                    "scripts/deepspeed-env.sh")
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "gradient_clipping": 0.5,
              "zero_optimization": {"stage": stage}, "zero_allow_untested_optimizer": True, "steps_per_print": 1000}
    save = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(ADAPTERS / "deepspeed")!r})
        import release
        # a one-rank group: port 0, the store binds one the kernel picks (accumcheck_adapter.ranks.group_port)
        os.environ.update({{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_SIZE": "1",
                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}})
        ds = release.load_deepspeed({version!r})
        import torch
        ds.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False, rank=0, world_size=1)
        model = torch.nn.Linear(3, 2)
        engine, *_ = ds.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                   config=json.loads({json.dumps(config)!r}))
        engine.save_checkpoint({str(tmp_path)!r}, tag="global_step10")
    """)
    done = subprocess.run([sys.executable, "-c", save], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    prefix = "zero_pp_rank_0_mp_rank_00" if stage == 3 else "mp_rank_00"
    path = tmp_path / "global_step10" / f"{prefix}_model_states.pt"
    assert read(path) == {"file": str(path), "format": "deepspeed-model-states", "ds_config": config,
                          "ds_version": version, "dp_world_size": 1}
    if stage == 3:
        optim = tmp_path / "global_step10" / f"{prefix}_optim_states.pt"
        assert read(optim) == {"file": str(optim), "format": "torch-save", "ds_config": config,
                               "ds_version": version}


# -- A Trainer's training_args.bin.


@requires_torch
@pytest.mark.parametrize("deepspeed_version", [None, "0.16.4"])
def test_a_real_trainer_training_args_bin(tmp_path, deepspeed_version):
    """transformers 4.46.3's TrainingArguments, saved by Trainer.save_model (which calls torch.save(self.args,
    .../training_args.bin)); with a DeepSpeed dict (which needs DeepSpeed importable), saved with that same call."""
    if not transformers_release.installed("4.46.3"):
        pytest.skip(f"transformers 4.46.3 is not installed: run {transformers_release.install_command('4.46.3')}")
    if deepspeed_version and not deepspeed_release.installed(deepspeed_version):
        pytest.skip(f"DeepSpeed {deepspeed_version} is not installed: run "
                    f"ACCUMCHECK_DEEPSPEED_RELEASES={deepspeed_version} scripts/deepspeed-env.sh")
    ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "zero_optimization": {"stage": 2}} if deepspeed_version else None
    save = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(ADAPTERS / "transformers")!r})
        import release
        out, ds = {str(tmp_path)!r}, json.loads({json.dumps(ds)!r})
        if ds:
            os.environ.update({{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                                "MASTER_PORT": "0"}})  # a one-rank group: the store binds a port the kernel picks
            release.deepspeed_release().load_deepspeed({deepspeed_version!r})
        transformers = release.load_transformers("4.46.3")
        import torch
        args = transformers.TrainingArguments(
            output_dir=out, gradient_accumulation_steps=4, per_device_train_batch_size=2, max_grad_norm=0.5,
            save_strategy="epoch", lr_scheduler_type="cosine", hub_token="secret", use_cpu=not ds, report_to=[],
            deepspeed=ds, save_safetensors=False)
        if ds:
            torch.save(args, os.path.join(out, "training_args.bin"))
        else:
            transformers.Trainer(model=torch.nn.Linear(2, 1), args=args).save_model(out)
    """)
    done = subprocess.run([sys.executable, "-c", save], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    path = tmp_path / "training_args.bin"
    out = read(path)
    assert (out["format"], out["training_arguments_class"]) == ("training-arguments",
                                                               "transformers.training_args.TrainingArguments")
    assert set(out) == {"file", "format", "training_arguments", "training_arguments_class"}
    fields = out["training_arguments"]
    assert fields["gradient_accumulation_steps"] == 4 and fields["per_device_train_batch_size"] == 2
    assert (fields["max_grad_norm"], fields["bf16"], fields["fp16"]) == (0.5, False, False)
    assert fields["average_tokens_across_devices"] is False  # 4.46.3's __post_init__: False outside distributed
    assert (fields["save_strategy"], fields["eval_strategy"], fields["lr_scheduler_type"]) == ("epoch", "no", "cosine")
    assert fields["hub_token"] == "<HUB_TOKEN>"  # as TrainingArguments.to_dict writes a token
    assert fields["deepspeed"] == ds
    assert (fields["_n_gpu"], fields["local_rank"]) == (1 if ds else 0, 0)  # DeepSpeed's setup counts one device
    if ds:
        hf_config = fields["hf_deepspeed_config"]
        assert hf_config["__class__"] == "transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig"
        assert hf_config["state"]["config"]["gradient_accumulation_steps"] == 4  # "auto" filled in
    else:
        assert fields["distributed_state"]["state"]["distributed_type"] == "NO"  # accelerate's enum, by value


@requires_torch
def test_a_stand_in_training_arguments_gives_every_field(tmp_path):
    path = tmp_path / "training_args.bin"
    torch.save(TrainingArguments(output_dir="out", gradient_accumulation_steps=8, bf16=True,
                                 deepspeed="ds_zero3.json", hub_token="secret"), path)
    assert read(path) == {"file": str(path), "format": "training-arguments", "training_arguments": {
        "output_dir": "out", "per_device_train_batch_size": 8, "gradient_accumulation_steps": 8, "max_grad_norm": 1.0,
        "bf16": True, "fp16": False, "deepspeed": "ds_zero3.json", "average_tokens_across_devices": False,
        "save_strategy": "steps", "local_rank": -1, "hub_token": "<HUB_TOKEN>", "push_to_hub_token": None,
        "accelerator_config": {"__class__": "test_saved_run.AcceleratorConfig",
                               "state": {"split_batches": False, "even_batches": True}},
        "_n_gpu": 0}, "training_arguments_class": "test_saved_run.TrainingArguments"}


@requires_torch
@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_a_subclass_under_any_pickle_protocol_is_recognised_by_its_fields(tmp_path, protocol):
    # Protocols 0 and 1 pickle a plain instance as copyreg._reconstructor(cls, object, None) and BUILD.
    path = tmp_path / "training_args.bin"
    torch.save(SFTConfig(output_dir="out", deepspeed=dict(DS_CONFIG)), path, pickle_protocol=protocol)
    out = read(path)
    assert out["training_arguments_class"] == "test_saved_run.SFTConfig"
    assert out["training_arguments"]["deepspeed"] == DS_CONFIG
    assert out["training_arguments"]["max_seq_length"] == 1024


@requires_torch
def test_training_arguments_inside_a_dict_are_a_torch_save(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"step": 3, "args": TrainingArguments(output_dir="out"), "weights": torch.ones(2)}, path)
    out = read(path)
    assert (out["format"], out["training_arguments"]["output_dir"]) == ("torch-save", "out")


# -- Safety: nothing from the file runs.


@requires_torch
@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_the_canary_a_real_load_runs_each_payload(tmp_path, payload):
    marker = tmp_path / "canary"
    path = tmp_path / "mp_rank_00_model_states.pt"
    torch.save(model_states(ds_config={"x": PAYLOADS[payload](marker)}), path)
    torch.load(path, weights_only=False)
    assert marker.exists()


@requires_torch
@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_a_payload_in_the_config_is_a_placeholder_and_does_not_run(tmp_path, payload, legacy):
    marker = tmp_path / "marker"
    path = tmp_path / "mp_rank_00_model_states.pt"
    torch.save(model_states(ds_config={"x": PAYLOADS[payload](marker), "stage": 2}), path,
               _use_new_zipfile_serialization=not legacy)
    out = read(path)
    assert not marker.exists()
    expected = {"os.system": f"<object {os.system.__module__}.system>", "builtins.eval": "<object builtins.eval>",
                "__setstate__": {"__class__": "test_saved_run.TouchOnSetState", "state": {"marker": str(marker)}}}
    assert out["ds_config"] == {"x": expected[payload], "stage": 2}


@requires_torch
@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_a_payload_as_the_whole_file_is_refused_and_does_not_run(tmp_path, payload):
    marker = tmp_path / "marker"
    path = tmp_path / "training_args.bin"
    torch.save(PAYLOADS[payload](marker), path)
    assert "no DeepSpeed ds_config or ds_version, and no TrainingArguments" in refused(path)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_payload_under_every_pickle_protocol_does_not_run(tmp_path, protocol):
    marker, canary = tmp_path / "marker", tmp_path / "canary"
    pickle.loads(pickle.dumps({"ds_config": system_payload(canary)}, protocol=protocol))
    assert canary.exists()
    path = torch_zip(tmp_path / "model_states.pt", pickle.dumps(
        {"ds_config": {"x": system_payload(marker)}, "ds_version": "1"}, protocol=protocol))
    assert read(path)["ds_config"] == {"x": f"<object {os.system.__module__}.system>"}
    assert not marker.exists()


@pytest.mark.parametrize("opcode", ["INST", "OBJ"])
def test_a_payload_through_the_inst_and_obj_opcodes_does_not_run(tmp_path, opcode):
    # Protocol 0's INST, MARK arguments `i module\nname\n`, and protocol 1's OBJ, MARK class arguments `o`: each calls
    # the class with the arguments.
    def call(marker: Path) -> str:
        if opcode == "INST":
            return f"(S'touch {marker}'\nios\nsystem\n"
        return f"(cos\nsystem\nS'touch {marker}'\no"

    marker, canary = tmp_path / "marker", tmp_path / "canary"
    pickle.loads(f"{call(canary)}.".encode())
    assert canary.exists()
    data = f"(dp0\nVds_config\np1\n{call(marker)}p2\ns.".encode()
    assert read(torch_zip(tmp_path / "model_states.pt", data))["ds_config"] == "<object os.system>"
    assert not marker.exists()


def test_a_payload_through_the_extension_registry_is_refused(tmp_path):
    marker, canary = tmp_path / "marker", tmp_path / "canary"
    copyreg.add_extension(os.system.__module__, "system", 240)
    try:
        data = pickle.dumps({"ds_config": system_payload(marker)}, protocol=2)
        pickle.loads(pickle.dumps(system_payload(canary), protocol=2))
    finally:
        copyreg.remove_extension(os.system.__module__, "system", 240)
    assert canary.exists()
    assert b"\x82\xf0" in data  # EXT1 240
    assert "extension code 240 (copyreg's registry) is refused" in refused(torch_zip(tmp_path / "m.pt", data))
    assert not marker.exists()


def test_a_payload_in_place_of_the_legacy_magic_number_does_not_run(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "model_states.pt"
    path.write_bytes(pickle.dumps(system_payload(marker), protocol=2) + pickle.dumps(1001, protocol=2))
    assert "not one torch.save wrote (no torch magic number): not a torch file" in refused(path)
    assert not marker.exists()


def test_a_memo_index_of_2_to_the_32_costs_one_entry(tmp_path):
    # PROTO 2, EMPTY_DICT, LONG_BINPUT 2**32 - 1, MARK, 'ds_version', '1', SETITEMS, STOP: the C unpickler would grow
    # its memo array to 2**32 entries; the pure-Python one keeps a dict.
    data = b"\x80\x02}r\xff\xff\xff\xff(X\x0a\x00\x00\x00ds_versionX\x01\x00\x00\x001u."
    assert pickle._loads(data) == {"ds_version": "1"}  # not pickle.loads: here it raises MemoryError
    out = read(torch_zip(tmp_path / "m.pt", data))
    assert (out["format"], out["ds_version"]) == ("torch-save", "1")


@pytest.mark.parametrize(("data", "error"), [
    # BUILD with slot state {"__class__": a global} on a tensor storage: Storage has no __dict__ (__slots__ = ()),
    # so its class cannot be swapped for one of ours, nor any attribute set.
    (b"\x80\x02}X\x09\x00\x00\x00ds_configX\x07\x00\x00\x00storage\x85QN}X\x09\x00\x00\x00__class__cos\nsystem\n"
     b"s\x86bs.", "TypeError: __class__ assignment"),
    # BUILD on a global itself: our __setstate__ called without an instance.
    (b"\x80\x02}X\x09\x00\x00\x00ds_configcos\nsystem\n}bs.", "TypeError: "),
])
def test_a_build_aimed_at_a_storage_or_a_global_is_a_malformed_pickle(tmp_path, data, error):
    assert f"archive/data.pkl cannot be unpickled ({error}" in refused(torch_zip(tmp_path / "m.pt", data))


def test_the_reader_imports_the_standard_library_only():
    tree = ast.parse(SCRIPT.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported - set(sys.stdlib_module_names)


@requires_torch
def test_isolated_mode_reads_the_same(tmp_path):
    path = tmp_path / "mp_rank_00_model_states.pt"
    torch.save(model_states(), path)
    assert read(path, "-I") == read(path)


# -- Bad input: exit 2 and one line naming the file and the problem.


def test_a_missing_file_a_folder_and_an_empty_file_are_refused(tmp_path):
    assert refused(tmp_path / "missing.pt").endswith("no such file")
    assert refused(tmp_path).endswith("not a regular file")
    (tmp_path / "empty.pt").write_bytes(b"")
    assert refused(tmp_path / "empty.pt").endswith("an empty file: not a torch file")


@pytest.mark.parametrize("content", [b"hello, world\n", b"\x00\x01\x02garbage", b"\x89PNG\r\n\x1a\n"])
def test_garbage_is_not_a_torch_file(tmp_path, content):
    path = tmp_path / "garbage.pt"
    path.write_bytes(content)
    assert refused(path).endswith("not a torch file")


def test_a_pickle_that_is_not_torch_s_is_not_a_torch_file(tmp_path):
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps({"ds_config": DS_CONFIG}, protocol=2))
    assert refused(path).endswith("not a torch file")


@requires_torch
@pytest.mark.parametrize("fraction", [0.5, 0.99])
def test_a_truncated_zip_is_refused(tmp_path, fraction):
    whole = tmp_path / "whole.pt"
    torch.save(model_states(), whole)
    data = whole.read_bytes()
    path = tmp_path / "truncated.pt"
    path.write_bytes(data[:int(len(data) * fraction)])
    assert "a truncated or corrupt zip archive (BadZipFile: " in refused(path)


@requires_torch
def test_a_truncated_legacy_file_is_refused(tmp_path):
    whole = tmp_path / "whole.pt"
    torch.save(model_states(), whole, _use_new_zipfile_serialization=False)
    path = tmp_path / "truncated.pt"
    path.write_bytes(whole.read_bytes()[:200])
    assert "the saved object cannot be unpickled" in refused(path)


def test_a_zip_without_one_data_pkl_is_not_a_torch_file(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    assert refused(path).endswith("a zip archive with 0 <name>/data.pkl entries, where torch.save writes one: "
                                  "not a torch file")


def test_a_zip_with_a_broken_pickle_is_refused(tmp_path):
    path = torch_zip(tmp_path / "m.pt", b"\x80\x02}q\x00(X\x09\x00\x00\x00ds_con")
    assert "archive/data.pkl cannot be unpickled" in refused(path)


def test_a_pickle_over_64_mib_is_refused(tmp_path):
    path = torch_zip(tmp_path / "big.pt", b"\x80\x02" + b"N" * saved_run.PICKLE_BYTES_MAX)
    assert refused(path).endswith(f"archive/data.pkl is {saved_run.PICKLE_BYTES_MAX + 2} bytes, over the limit of "
                                  f"{saved_run.PICKLE_BYTES_MAX} bytes for a pickle")


@requires_torch
def test_legacy_pickles_past_the_limit_are_refused(tmp_path):
    path = tmp_path / "m.pt"
    torch.save(model_states(ds_config={"padding": "x" * 4096}), path, _use_new_zipfile_serialization=False)
    with pytest.raises(saved_run.SavedRunError, match="do not end within the first 1024 bytes, the limit for a pickle"):
        saved_run.summarise(path, pickle_bytes_max=1024)
    assert saved_run.summarise(path)["ds_config"] == {"padding": "x" * 4096}


@requires_torch
def test_nesting_past_the_depth_bound_is_refused(tmp_path):
    deep: list[Any] = []
    for _ in range(saved_run.DEPTH_MAX + 10):
        deep = [deep]
    path = tmp_path / "m.pt"
    torch.save(model_states(ds_config={"deep": deep}), path)
    assert refused(path).endswith(f"values nested more than {saved_run.DEPTH_MAX} levels deep")


@requires_torch
def test_shared_references_that_unfold_past_the_value_bound_are_refused(tmp_path):
    # 26 levels of [x, x]: 2**26 values written out from a pickle of a few hundred bytes.
    tree: list[Any] = []
    for _ in range(26):
        tree = [tree, tree]
    path = tmp_path / "m.pt"
    torch.save(model_states(ds_config=tree), path)
    assert refused(path).endswith(f"more than {saved_run.NODES_MAX} values to write out")


@requires_torch
def test_a_file_with_nothing_recognised_is_refused(tmp_path):
    tensor, other = tmp_path / "tensor.pt", tmp_path / "other.pt"
    torch.save(torch.ones(3), tensor)
    torch.save({"model": torch.ones(3), "epoch": 2}, other)
    assert refused(tensor).endswith("the saved object is an instance of torch._utils._rebuild_tensor_v2: no DeepSpeed "
                                    "ds_config or ds_version, and no TrainingArguments")
    assert refused(other).endswith("the saved object is a dict with keys ['epoch', 'model']: no DeepSpeed ds_config "
                                   "or ds_version, and no TrainingArguments")


def test_the_command_line_wants_one_file():
    done = subprocess.run([SYSTEM_PYTHON, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("usage: saved_run.py FILE")
    done = subprocess.run([SYSTEM_PYTHON, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0 and done.stderr.startswith("usage: saved_run.py FILE")


def test_summarise_in_process_matches_the_command_line(tmp_path):
    path = torch_zip(tmp_path / "m.pt", pickle.dumps({"module": {}, "ds_config": {"a": 1}, "ds_version": "2"}))
    assert saved_run.summarise(path) == read(path)
    assert isinstance(saved_run.load(path), dict)
