"""Reads the configuration inside a file that torch.save wrote, without torch and without running the file's code.

For `accumcheck audit`, which runs `python3 saved_run.py FILE` and parses one JSON object from stdout. Two kinds of
file are recognised:
  - a DeepSpeed model-states file (global_step10/mp_rank_00_model_states.pt, zero_pp_rank_0_mp_rank_00_...): the
    dict that DeepSpeedEngine._save_checkpoint saves (deepspeed/runtime/engine.py: `dict(module=..., ...,
    ds_config=self.config, ds_version=version)`, built in _common_checkpoint_state on master); ds_config is the
    config the run used: a dict, or, before DeepSpeed 0.18.6, the path as given when the run passed a path
    (0.18.6 made deepspeed.initialize load a path into a dict before the engine sees it, commit 6b9cab1dd);
  - a transformers Trainer's training_args.bin: torch.save of the TrainingArguments dataclass (or a subclass:
    Seq2SeqTrainingArguments, TRL's SFTConfig, ...), recognised by its gradient_accumulation_steps and
    per_device_train_batch_size fields, whose fields are all written out.
Any other file holding one of them (a ZeRO optimizer-states file, which also saves ds_config and ds_version; a dict
with a TrainingArguments among its values) is format "torch-save". Both container formats of torch.save are read:
the zip archive of torch >= 1.6 (`<name>/data.pkl`, the pickle, beside `<name>/data/<key>`, the storages, which are
never opened) and the legacy sequence of pickles of torch < 1.6 (magic number, protocol version 1001, system info,
the object; the storages follow and are never read).

Why no code from the file can run. Unpickling reaches a callable in one way only: the GLOBAL, STACK_GLOBAL and INST
opcodes (and EXT1/2/4, through the extension registry) ask the unpickler's find_class for module.name; REDUCE,
NEWOBJ, NEWOBJ_EX, INST, OBJ and BUILD then call what is on the stack, and everything else on the stack is data the
pickle built (None, bools, numbers, strings, bytes, tuples, lists, dicts, sets), none of it callable. Here
find_class imports nothing and looks nothing up: it returns a class of ours, made on the spot, that records the
two names. Calling it (REDUCE, NEWOBJ) runs our __new__, which records the arguments; BUILD calls our __setstate__,
which records the state; SETITEMS and APPENDS call our __setitem__ and append, which record the items. The
extension registry is refused outright (get_extension), so it cannot hand back a real object cached by an earlier
load, and persistent_load, asked for each tensor storage, returns an inert placeholder without reading anything.
So nothing the file names is ever imported, and the only functions the load ever calls are ours and the builtin
constructors of plain data. The unpickler is pickle's pure-Python one (pickle._Unpickler, the same class that
pickle.Unpickler is when the C accelerator is absent): its memo is a dict, so a PUT to index 2**32 - 1 costs one
entry, where the C unpickler's memo is an array it would grow to that index.

Bounds: a pickle over PICKLE_BYTES_MAX (64 MiB) is refused (the data.pkl of a model-states file with thousands of
tensors is a few MB; the storages do not count, as they are never read); what is written out is at most
DEPTH_MAX levels deep and NODES_MAX values in all, which also bounds a pickle whose shared references (the memo)
would unfold into an exponentially large tree; a reference cycle is written as "<cycle>".

Values without a JSON form are written as strings: "<torch storage>", "<torch tensor>", "<object module.Name>"
(a class or function the file names, or an instance of one with nothing else to show), "<bytes N>". An instance
called with one plain argument and nothing else, of a class named in CapWords, is written as that argument: an
Enum member (transformers' IntervalStrategy.STEPS pickles as IntervalStrategy("steps")). torch.device("cuda", 0)
is written "cuda:0"; an OrderedDict or defaultdict as a dict; any other instance with state as
{"__class__": "module.Name", "state": {...}} ("args" and "items" beside it when it had them).

Command line: saved_run.py FILE
  exit 0: one JSON object on stdout, {"file": FILE, "format": "deepspeed-model-states" | "training-arguments" |
          "torch-save", "ds_config": ..., "ds_version": ..., "dp_world_size": N, "training_arguments": {field: value,
          ...}, "training_arguments_class": "module.Name"}, the last five present only when found;
  exit 2: one line on stderr, "saved_run.py: FILE: <the problem>" (no such file, not a torch file, a truncated
          zip, a pickle that cannot be read, a limit passed, nothing recognised), nothing on stdout.
Run it as `python3 -I saved_run.py FILE` where possible: isolated mode keeps this folder off sys.path (none of the
kit's module names shadows one of the standard library's today, but isolation makes that a non-question).
"""

from __future__ import annotations

import _compat_pickle
import io
import json
import math
import os
import pickle
import sys
import zipfile
from pathlib import Path
from typing import Any

PICKLE_BYTES_MAX = 64 * 1024 * 1024
DEPTH_MAX = 100
NODES_MAX = 1_000_000
LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C  # torch/serialization.py MAGIC_NUMBER
LEGACY_PROTOCOL_VERSION = 1001  # torch/serialization.py PROTOCOL_VERSION
# Two fields every TrainingArguments (and every subclass: Seq2SeqTrainingArguments, TRL's configs) has.
TRAINING_ARGUMENTS_FIELDS = ("gradient_accumulation_steps", "per_device_train_batch_size")
_DICT_CLASSES = {"collections.OrderedDict", "collections.defaultdict"}
_SET_CLASSES = {"builtins.set", "builtins.frozenset"}
_BYTES_CALLS = {"_codecs.encode", "builtins.bytes", "builtins.bytearray"}


class SavedRunError(Exception):
    """A file this reader refuses; the message is one line that names the problem (the caller names the file)."""


class Placeholder:
    """Stands for a global the file names (find_class makes one subclass per module.name) and, as an instance, for
    the result of calling it: what the pickle passed in is recorded, nothing is run."""

    module = ""
    name = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Placeholder:
        inst = super().__new__(cls)
        inst.args = args
        inst.kwargs = kwargs
        inst.state = None
        inst.items = []  # APPEND, APPENDS
        inst.entries = []  # SETITEM, SETITEMS: (key, value) pairs
        return inst

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # __new__ has recorded the arguments

    def __setstate__(self, state: Any) -> None:  # BUILD
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.entries.append((key, value))

    def append(self, value: Any) -> None:
        self.items.append(value)

    def extend(self, values: Any) -> None:
        self.items.extend(values)

    def add(self, value: Any) -> None:  # ADDITEMS
        self.items.append(value)

    @classmethod
    def qualified_name(cls) -> str:
        return f"{cls.module}.{cls.name}"


class Storage:
    """What persistent_load returns for a tensor storage: its bytes stay in the file, unread. No attributes, so a
    BUILD aimed at one (which would set them) fails as a malformed pickle."""

    __slots__ = ()


class InertUnpickler(pickle._Unpickler):
    """An unpickler that imports nothing: see the module's docstring."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self._placeholders: dict[tuple[str, str], type[Placeholder]] = {}

    def find_class(self, module: str, name: str) -> type[Placeholder]:
        # The names of Python 2 that pickle protocols 0-2 write (__builtin__.set, copy_reg._reconstructor) as
        # Python 3's, as pickle's own find_class maps them before it imports: a table lookup, nothing imported.
        if self.proto < 3 and self.fix_imports:
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        key = (str(module), str(name))
        if key not in self._placeholders:
            self._placeholders[key] = type("Global", (Placeholder,), {"module": key[0], "name": key[1]})
        return self._placeholders[key]

    def persistent_load(self, pid: Any) -> Storage:
        return Storage()

    def get_extension(self, code: int) -> Any:
        raise pickle.UnpicklingError(f"extension code {code} (copyreg's registry) is refused")


def _unpickle(stream: io.BytesIO, what: str) -> Any:
    try:
        return InertUnpickler(stream).load()
    except Exception as e:  # the pickle is the file's: any malformation is the file's problem, reported as such
        raise SavedRunError(f"{what} cannot be unpickled ({type(e).__name__}: {e})") from None


def _read_zip(path: Path, pickle_bytes_max: int) -> Any:
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [info for info in archive.infolist()
                       if info.filename.count("/") == 1 and info.filename.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise SavedRunError(f"a zip archive with {len(pickles)} <name>/data.pkl entries, where torch.save "
                                    "writes one: not a torch file")
            info = pickles[0]
            if info.file_size > pickle_bytes_max:
                raise SavedRunError(f"{info.filename} is {info.file_size} bytes, over the limit of "
                                    f"{pickle_bytes_max} bytes for a pickle")
            with archive.open(info) as entry:
                data = entry.read(pickle_bytes_max + 1)  # bounded even where the header understates the size
    except SavedRunError:
        raise
    except Exception as e:  # zipfile raises BadZipFile, EOFError, OSError, ValueError, zlib.error, ...
        raise SavedRunError(f"a truncated or corrupt zip archive ({type(e).__name__}: {e})") from None
    if len(data) > pickle_bytes_max:
        raise SavedRunError(f"{info.filename} is over the limit of {pickle_bytes_max} bytes for a pickle")
    return _unpickle(io.BytesIO(data), info.filename)


def _read_legacy(path: Path, pickle_bytes_max: int) -> Any:
    with path.open("rb") as f:
        data = f.read(pickle_bytes_max + 1)
    stream = io.BytesIO(data[:pickle_bytes_max])
    try:
        magic = _unpickle(stream, "the first pickle")
        if not (isinstance(magic, int) and magic == LEGACY_MAGIC_NUMBER):
            raise SavedRunError("a pickle, but not one torch.save wrote (no torch magic number): not a torch file")
        protocol = _unpickle(stream, "the protocol version")
        if not (isinstance(protocol, int) and protocol == LEGACY_PROTOCOL_VERSION):
            raise SavedRunError(f"a legacy torch file of protocol version {protocol!r}, where "
                                f"{LEGACY_PROTOCOL_VERSION} is the only one torch.save wrote")
        _unpickle(stream, "the system information")
        return _unpickle(stream, "the saved object")
    except SavedRunError as e:
        if len(data) > pickle_bytes_max:
            raise SavedRunError(f"the pickles do not end within the first {pickle_bytes_max} bytes, the limit for "
                                f"a pickle ({e})") from None
        raise


def load(path: Path, pickle_bytes_max: int = PICKLE_BYTES_MAX) -> Any:
    """The object torch.save wrote to `path`, with placeholders for every global (Placeholder) and storage."""
    if not path.exists():
        raise SavedRunError("no such file")
    if not path.is_file():
        raise SavedRunError("not a regular file")
    with path.open("rb") as f:
        head = f.read(4)
    if not head:
        raise SavedRunError("an empty file: not a torch file")
    if head.startswith(b"PK"):
        return _read_zip(path, pickle_bytes_max)
    if head.startswith(b"\x80"):  # PROTO: torch.save's legacy format pickles its magic number with protocol 2
        return _read_legacy(path, pickle_bytes_max)
    raise SavedRunError("neither a zip archive (torch >= 1.6) nor a sequence of pickles (torch < 1.6): "
                        "not a torch file")


class _Writer:
    """Turns the loaded object into JSON values, within DEPTH_MAX and NODES_MAX (see the module's docstring)."""

    def __init__(self) -> None:
        self.nodes = 0
        self.path: set[int] = set()  # ids of the containers being written, to find cycles

    def value(self, obj: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > NODES_MAX:
            raise SavedRunError(f"more than {NODES_MAX} values to write out")
        if depth > DEPTH_MAX:
            raise SavedRunError(f"values nested more than {DEPTH_MAX} levels deep")
        if obj is None or isinstance(obj, bool | str):
            return obj
        if isinstance(obj, int):
            return obj if obj.bit_length() <= 64 else f"<int of {obj.bit_length()} bits>"
        if isinstance(obj, float):
            if math.isnan(obj):
                return "nan"
            return obj if math.isfinite(obj) else ("inf" if obj > 0 else "-inf")
        if isinstance(obj, bytes | bytearray):
            return f"<bytes {len(obj)}>"
        if isinstance(obj, Storage):
            return "<torch storage>"
        if isinstance(obj, type) and issubclass(obj, Placeholder):
            return f"<object {obj.qualified_name()}>"
        if id(obj) in self.path:
            return "<cycle>"
        self.path.add(id(obj))
        try:
            return self._container(obj, depth + 1)
        finally:
            self.path.discard(id(obj))

    def _container(self, obj: Any, depth: int) -> Any:
        if isinstance(obj, dict):
            return self._mapping(obj.items(), depth)
        if isinstance(obj, list | tuple):
            return [self.value(item, depth) for item in obj]
        if isinstance(obj, set | frozenset):
            return self._unordered(obj, depth)
        if isinstance(obj, Placeholder):
            return self._instance(obj, depth)
        return f"<{type(obj).__name__}>"  # a PickleBuffer or the like; not reached by the pickles torch writes

    def _unordered(self, items: Any, depth: int) -> list[Any]:
        """A set's items, in an order of their own (sorted by their JSON text), so that the output is stable."""
        written = [self.value(item, depth) for item in items]
        return sorted(written, key=lambda item: json.dumps(item, sort_keys=True))

    def _mapping(self, pairs: Any, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in pairs:
            written = self.value(key, depth)
            out[written if isinstance(written, str) else json.dumps(written)] = self.value(item, depth)
        return out

    def _instance(self, obj: Placeholder, depth: int) -> Any:
        cls = type(obj)
        name = _class_name(obj)
        args = obj.args if name == cls.qualified_name() else ()  # copyreg._reconstructor's are the class
        if cls.module in ("torch._utils", "torch._tensor") and cls.name.startswith("_rebuild_"):
            return "<torch tensor>"
        if name == "torch.device" and 1 <= len(args) <= 2 and all(
                isinstance(a, str | int) and not isinstance(a, bool) for a in args):
            return ":".join(str(a) for a in args)
        bare = obj.state is None and not obj.kwargs and not obj.items and not obj.entries
        if bare and name in _SET_CLASSES and len(args) <= 1:  # protocols 0-2 pickle a set as set([items])
            return self._unordered(args[0] if args and isinstance(args[0], list) else [], depth)
        if bare and name in _BYTES_CALLS and len(args) <= 2 and all(isinstance(a, str | bytes) for a in args):
            return f"<bytes {len(args[0]) if args else 0}>"  # and bytes as _codecs.encode(text, "latin1")
        if bare and len(args) == 1 and cls.name[:1].isupper() and (
                args[0] is None or isinstance(args[0], bool | int | float | str)):
            return self.value(args[0], depth)  # an Enum member, by value
        if name in _DICT_CLASSES and not obj.state and not obj.items:
            return self._mapping(obj.entries, depth)
        if bare:
            return f"<object {name}>"  # a global, or a call whose result only running it would tell
        out: dict[str, Any] = {"__class__": name}
        if args:
            out["args"] = self.value(args, depth)
        if obj.kwargs:
            out["kwargs"] = self._mapping(obj.kwargs.items(), depth)
        state = _instance_dict(obj)
        if state is not None:
            out["state"] = self._mapping(state.items(), depth)
        elif obj.state is not None:
            out["state"] = self.value(obj.state, depth)
        if obj.entries:
            out["items"] = self._mapping(obj.entries, depth)
        elif obj.items:
            out["items"] = self.value(obj.items, depth)
        return out


def _class_name(obj: Placeholder) -> str:
    """module.Name of a placeholder instance's class; for copyreg._reconstructor(cls, base, state), which
    protocols 0 and 1 pickle a plain instance with, that of cls."""
    cls = type(obj)
    if cls.qualified_name() == "copyreg._reconstructor" and obj.args and isinstance(obj.args[0], type) \
            and issubclass(obj.args[0], Placeholder):
        return obj.args[0].qualified_name()
    return cls.qualified_name()


def _instance_dict(obj: Any) -> dict[Any, Any] | None:
    """The attributes BUILD gave a placeholder instance: its state dict, merged with the slot state of a
    (state, slotstate) pair. None for anything else."""
    if not isinstance(obj, Placeholder):
        return None
    state = obj.state
    if isinstance(state, dict):
        return state
    if isinstance(state, tuple) and len(state) == 2 and all(part is None or isinstance(part, dict) for part in state):
        return {**(state[0] or {}), **(state[1] or {})}
    return None


def _as_dict(obj: Any) -> dict[Any, Any] | None:
    """A dict, or an OrderedDict placeholder as a dict; None for anything else."""
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, Placeholder) and _class_name(obj) in _DICT_CLASSES and not obj.state:
        return dict(obj.entries)
    return None


def _training_arguments(obj: Any) -> dict[Any, Any] | None:
    """The fields of a TrainingArguments instance (or of a subclass'), None for anything else. A token field
    (hub_token, push_to_hub_token, ...) that is set is written "<HUB_TOKEN>", as TrainingArguments.to_dict does."""
    fields = _instance_dict(obj)
    if fields is None or not all(field in fields for field in TRAINING_ARGUMENTS_FIELDS):
        return None
    return {key: f"<{key.upper()}>" if isinstance(key, str) and key.endswith("_token") and value is not None
            else value for key, value in fields.items()}


def _describe(obj: Any) -> str:
    return f"an instance of {_class_name(obj)}" if isinstance(obj, Placeholder) else f"a {type(obj).__name__}"


def summarise(file: str | os.PathLike[str], pickle_bytes_max: int = PICKLE_BYTES_MAX) -> dict[str, Any]:
    """The JSON object saved_run.py writes for `file` (see the module's docstring); raises SavedRunError."""
    name = os.fspath(file)
    obj = load(Path(name), pickle_bytes_max)
    writer = _Writer()
    fields = _training_arguments(obj)
    if fields is not None:
        return {"file": name, "format": "training-arguments", "training_arguments": writer.value(fields),
                "training_arguments_class": _class_name(obj)}
    state = _as_dict(obj)
    if state is None:
        raise SavedRunError(f"the saved object is {_describe(obj)}: no DeepSpeed ds_config or ds_version, and no "
                            "TrainingArguments")
    args = next((item for item in state.values() if _training_arguments(item) is not None), None)
    if "ds_config" not in state and "ds_version" not in state and args is None:
        keys = sorted(str(key) for key in list(state)[:20])
        raise SavedRunError(f"the saved object is a dict with keys {keys}{' ...' if len(state) > 20 else ''}: no "
                            "DeepSpeed ds_config or ds_version, and no TrainingArguments")
    is_model_states = "module" in state and "ds_config" in state
    out: dict[str, Any] = {"file": name, "format": "deepspeed-model-states" if is_model_states else "torch-save"}
    for key in ("ds_config", "ds_version"):
        if key in state:
            out[key] = writer.value(state[key])
    # The data-parallel world size the engine saved beside them (_common_checkpoint_state's dp_world_size).
    if isinstance(state.get("dp_world_size"), int) and not isinstance(state.get("dp_world_size"), bool):
        out["dp_world_size"] = state["dp_world_size"]
    if args is not None:
        out["training_arguments"] = writer.value(_training_arguments(args))
        out["training_arguments_class"] = _class_name(args)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]) or len(args) != 1:
        print("usage: saved_run.py FILE  (a file torch.save wrote: a DeepSpeed model-states file or a Trainer's "
              "training_args.bin); writes one JSON object to stdout, exit 2 on a bad file", file=sys.stderr)
        return 0 if len(args) == 1 else 2
    try:
        out = json.dumps(summarise(args[0]), allow_nan=False)
    except SavedRunError as e:
        problem = str(e)
    except OSError as e:
        problem = f"cannot be read ({e.strerror or e})"
    except Exception as e:  # a bug of ours: still one line, never a traceback (the caller parses stderr)
        problem = f"internal error ({type(e).__name__}: {e})"
    else:
        print(out)
        return 0
    print(" ".join(f"saved_run.py: {args[0]}: {problem}".splitlines()), file=sys.stderr)  # one line, always
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
