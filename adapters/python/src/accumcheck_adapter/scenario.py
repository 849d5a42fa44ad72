"""The run request, decoded into typed values (docs/adapter-protocol.md section 3).

`scenario` is the exact form (rationals as strings) and is authoritative; `values` carries the same numbers as
JSON floats. Decoding reads both and checks that every data value (initial parameters, features, targets) is
exactly its rational, and representable in the run's dtype: the protocol promises dyadic values, so a float
model loses nothing. Hyperparameters (lr, betas, eps, ...) need not be dyadic (the default eps is 1/10^8):
their float must be the nearest double of the rational. Every problem is reported as a ProtocolError naming
the JSON path, the same paths the C++ readers use ("scenario.steps[0][1][0][2].targets").

Decoding is on every trial's path, so the data matrices take a fast road first (_DyadicReader: the same
checks on the rationals' texts, no Fraction) and go to the readers that name the problem (_exact_matrix,
_float_matrix) at anything it does not accept. The exact matrices of data decoded that way
(Sequence.exact_features and exact_targets, Scenario.exact_initial_parameters) are built from the checked
floats when first read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from accumcheck_adapter.errors import ProtocolError
from accumcheck_adapter.exact import format_rational, is_float32, parse_float, parse_rational

MODEL_KINDS = ("linear", "mlp", "tied_embedding")
AGGREGATIONS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "sum")
OPTIMIZERS = ("sgd", "adam", "adamw")
DTYPES = ("exact", "fp32", "fp64")
PRECISIONS = ("full", "bf16", "fp16")
BOUNDARIES = ("automatic", "manual")
CALLS = ("backward", "set_boundary", "step", "end_window", "checkpoint")

# Bounds shared with the C++ side (models/model_spec.h, sim/scenario.h).
MODEL_DIMENSION_MAX = 4096
EXPERT_COUNT_MAX = 64
RANK_COUNT_MAX = 64
ACCUMULATION_STEPS_MAX = 256
STEP_COUNT_MAX = 1024
MICRO_BATCHES_PER_WINDOW_MAX = 1024

Matrix = list[list[float]]
ExactMatrix = list[list[Fraction]]
JSON = dict[str, Any]


# ----------------------------------------------------------------------------------------------- readers


def _field(obj: object, path: str, key: str) -> Any:
    if not isinstance(obj, dict):
        raise ProtocolError(path, f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise ProtocolError(f"{path}.{key}" if path else key, "missing")
    return obj[key]


def _int(value: object, path: str, lo: int = -(10**9), hi: int = 10**9) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(path, f"expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ProtocolError(path, f"{value} is outside [{lo}, {hi}]")
    return value


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(path, f"expected true or false, got {value!r}")
    return value


def _choice(value: object, path: str, names: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in names:
        raise ProtocolError(path, f"{value!r} is not one of {', '.join(names)}")
    return value


def _list(value: object, path: str, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ProtocolError(path, f"expected an array of {what}, got {type(value).__name__}")
    return value


def _exact_matrix(value: object, path: str, rows: int, cols: int) -> ExactMatrix:
    value = _list(value, path, "rows")
    if len(value) != rows:
        raise ProtocolError(path, f"expected {rows} rows, got {len(value)}")
    out = []
    for r, row in enumerate(value):
        if not isinstance(row, list) or len(row) != cols:
            raise ProtocolError(f"{path}[{r}]", f"expected a row of {cols} values")
        out.append([parse_rational(x, f"{path}[{r}][{c}]") for c, x in enumerate(row)])
    return out


def _float_matrix(value: object, path: str, exact: ExactMatrix, dtype: str) -> Matrix:
    """The float form of a matrix, checked value by value against its exact form."""
    value = _list(value, path, "rows")
    cols = len(exact[0]) if exact else 0
    if len(value) != len(exact):
        raise ProtocolError(path, f"expected {len(exact)} rows, got {len(value)}")
    out = []
    for r, row in enumerate(value):
        if not isinstance(row, list) or len(row) != cols:
            raise ProtocolError(f"{path}[{r}]", f"expected a row of {cols} values")
        out_row = []
        for c, x in enumerate(row):
            where = f"{path}[{r}][{c}]"
            f = parse_float(x, where)
            if f != exact[r][c]:  # float == Fraction compares exact values
                raise ProtocolError(where, f"{f!r} is not exactly the scenario's {format_rational(exact[r][c])}")
            if dtype == "fp32" and not is_float32(f):
                raise ProtocolError(where, f"{f!r} is not representable in fp32")
            out_row.append(f)
        out.append(out_row)
    return out


class _DyadicReader:
    """The fast road for the data matrices of one request: a float matrix of `values` is accepted when it has
    the shape and each float's exact value, written as the C++ side writes rationals ("n" or "n/d" in lowest
    terms, from float.as_integer_ratio), is the text in `scenario` (or a JSON integer equal to the float), and,
    in fp32, each float is a float32. Else matrix() gives None and the readers above decide: they accept more
    ("2/4" say) or name the problem. Whatever this accepts, they accept, with the same floats. The text of
    each float is computed once per request (data repeats: small dyadic values); no Fraction is built."""

    def __init__(self, dtype: str) -> None:
        self._fp32 = dtype == "fp32"
        self._texts: dict[float, str] = {}  # only floats of the dtype

    def _text(self, f: float) -> str | None:
        try:
            n, d = f.as_integer_ratio()
        except (OverflowError, ValueError):  # inf, nan
            return None
        if self._fp32 and not is_float32(f):
            return None
        text = self._texts[f] = str(n) if d == 1 else f"{n}/{d}"
        return text

    def matrix(self, exact: object, values: object, rows: int, cols: int) -> Matrix | None:
        if type(exact) is not list or type(values) is not list or len(exact) != rows or len(values) != rows:
            return None
        texts = self._texts
        out: Matrix = []
        for xs, fs in zip(exact, values, strict=True):
            if type(xs) is not list or type(fs) is not list or len(xs) != cols or len(fs) != cols:
                return None
            row = []
            for x, f in zip(xs, fs, strict=True):
                if type(f) is not float:
                    if type(f) is not int or not -_DOUBLE_MAX <= f <= _DOUBLE_MAX:
                        return None
                    f = float(f)
                text = texts.get(f) or self._text(f)
                if text is None or (x != text and (type(x) is not int or f != x)):
                    return None
                row.append(f)
            out.append(row)
        return out


_DOUBLE_MAX = sys.float_info.max


def _exact_of(m: Matrix) -> ExactMatrix:
    """The exact values of a float matrix (of data the decoder has checked against its rationals)."""
    return [[Fraction(x) for x in row] for row in m]


def _exact_of_parameters(params: dict[str, Matrix]) -> dict[str, ExactMatrix]:
    return {name: _exact_of(m) for name, m in params.items()}


class _ExactOf:
    """A dataclass field of exact values. Given None (what the decoder gives for data it has checked), it holds
    the exact values of its float twin, built on the first read: decoding makes no Fraction for the data, and
    an adapter that reads only floats never pays for one. Given a value, it holds that value."""

    def __init__(self, floats: str, exact: Callable[[Any], Any], *, default: bool) -> None:
        self._floats, self._exact, self._default = floats, exact, default

    def __set_name__(self, owner: type, name: str) -> None:
        self._name, self._slot = name, f"_{name}"

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:  # the dataclass asks for the field's default: None, or AttributeError for none
            if self._default:
                return None
            raise AttributeError(self._name)
        value = obj.__dict__[self._slot]
        if value is None:
            value = obj.__dict__[self._slot] = self._exact(getattr(obj, self._floats))
        return value

    def __set__(self, obj: object, value: Any) -> None:  # a frozen dataclass's __init__ sets through here
        obj.__dict__[self._slot] = value


def _int_list(value: object, path: str) -> list[int]:
    # _int's checks, its path formatted only for an entry it has to look at.
    return [x if type(x) is int and -(10**9) <= x <= 10**9 else _int(x, f"{path}[{i}]")
            for i, x in enumerate(_list(value, path, "integers"))]


def _matrix_json(m: ExactMatrix) -> list[list[str]]:
    return [[format_rational(x) for x in row] for row in m]


# ----------------------------------------------------------------------------------------- the training


@dataclass(frozen=True)
class ModelSpec:
    """models/model_spec.h: the model kind, its sizes, and the names of frozen parameters."""

    kind: str
    input_size: int = 1
    output_size: int = 1
    hidden_size: int = 0
    vocab_size: int = 0
    embed_size: int = 0
    expert_count: int = 1
    frozen: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _choice(self.kind, "model.kind", MODEL_KINDS)
        needed = {
            "linear": ("input_size", "output_size", "expert_count"),
            "mlp": ("input_size", "output_size", "hidden_size"),
            "tied_embedding": ("vocab_size", "embed_size"),
        }[self.kind]
        for name in needed:
            hi = EXPERT_COUNT_MAX if name == "expert_count" else MODEL_DIMENSION_MAX
            _int(getattr(self, name), f"model.{name}", 1, hi)
        names = self.parameter_names()
        for name in self.frozen:
            if name not in names:
                raise ProtocolError("model.frozen", f"{name!r} is not a parameter of this {self.kind} model")

    @property
    def has_experts(self) -> bool:
        return self.kind == "linear" and self.expert_count > 1

    def parameter_names(self) -> list[str]:
        """In the scenario's order: the order of the C++ Parameters and Gradient tensors."""
        if self.kind == "linear":
            if self.expert_count == 1:
                return ["weight", "bias"]
            return [f"expert{e}.{p}" for e in range(self.expert_count) for p in ("weight", "bias")]
        if self.kind == "mlp":
            return ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
        return ["embedding", "bias"]

    def parameter_shapes(self) -> list[tuple[int, int]]:
        if self.kind == "linear":
            return [(self.output_size, self.input_size), (self.output_size, 1)] * self.expert_count
        if self.kind == "mlp":
            h, i, o = self.hidden_size, self.input_size, self.output_size
            return [(h, i), (h, 1), (o, h), (o, 1)]
        return [(self.vocab_size, self.embed_size), (self.vocab_size, 1)]

    @property
    def feature_size(self) -> int:
        """Columns of a sequence's features (0 for tied_embedding, which reads token_ids)."""
        return 0 if self.kind == "tied_embedding" else self.input_size

    @property
    def target_size(self) -> int:
        return self.vocab_size if self.kind == "tied_embedding" else self.output_size

    def is_frozen(self, name: str) -> bool:
        return name in self.frozen

    @classmethod
    def from_json(cls, obj: object, path: str = "scenario.training.model") -> ModelSpec:
        kind = _choice(_field(obj, path, "kind"), f"{path}.kind", MODEL_KINDS)
        assert isinstance(obj, dict)
        sizes = {
            key: _int(obj[key], f"{path}.{key}")
            for key in ("input_size", "output_size", "hidden_size", "vocab_size", "embed_size", "expert_count")
            if key in obj
        }
        frozen = _list(obj.get("frozen", []), f"{path}.frozen", "parameter names")
        for i, name in enumerate(frozen):
            if not isinstance(name, str):
                raise ProtocolError(f"{path}.frozen[{i}]", f"expected a parameter name, got {name!r}")
        try:
            return cls(kind, **sizes, frozen=tuple(frozen))
        except ProtocolError as e:
            raise ProtocolError(path + e.path.removeprefix("model"), e.message) from None

    def to_json(self) -> JSON:
        return {
            "kind": self.kind,
            "input_size": self.input_size,
            "output_size": self.output_size,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "embed_size": self.embed_size,
            "expert_count": self.expert_count,
            "frozen": list(self.frozen),
        }


@dataclass(frozen=True)
class Aggregation:
    """models/loss_aggregation.h: the mode and the constant C of seq-mean-token-sum-norm."""

    mode: str
    norm_constant: Fraction = Fraction(1)

    @classmethod
    def from_json(cls, obj: object, path: str = "scenario.training.aggregation") -> Aggregation:
        mode = _choice(_field(obj, path, "mode"), f"{path}.mode", AGGREGATIONS)
        assert isinstance(obj, dict)
        c = parse_rational(obj.get("norm_constant", "1"), f"{path}.norm_constant")
        if mode == "seq-mean-token-sum-norm" and c <= 0:
            raise ProtocolError(f"{path}.norm_constant", f"C = {c} must be positive")
        return cls(mode, c)

    def to_json(self) -> JSON:
        return {"mode": self.mode, "norm_constant": format_rational(self.norm_constant)}


_OPTIMIZER_RATIONALS = ("lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps")


@dataclass(frozen=True)
class OptimizerSpec:
    """models/optimizer.h: torch.optim's SGD, Adam and AdamW hyperparameters, exactly. Defaults as C++'s."""

    kind: str
    lr: Fraction = Fraction(1, 10)
    weight_decay: Fraction = Fraction(0)
    momentum: Fraction = Fraction(0)
    dampening: Fraction = Fraction(0)
    nesterov: bool = False
    beta1: Fraction = Fraction(9, 10)
    beta2: Fraction = Fraction(999, 1000)
    eps: Fraction = Fraction(1, 10**8)
    missing_gradient_is_zero: bool = False

    @classmethod
    def from_json(cls, obj: object, path: str = "scenario.training.optimizer") -> OptimizerSpec:
        kind = _choice(_field(obj, path, "kind"), f"{path}.kind", OPTIMIZERS)
        assert isinstance(obj, dict)
        values: dict[str, Any] = {
            key: parse_rational(obj[key], f"{path}.{key}") for key in _OPTIMIZER_RATIONALS if key in obj
        }
        for key in ("nesterov", "missing_gradient_is_zero"):
            if key in obj:
                values[key] = _bool(obj[key], f"{path}.{key}")
        spec = cls(kind, **values)
        spec._validate(path)
        return spec

    def _validate(self, path: str) -> None:
        """The checks of PyTorch's constructors, as models/optimizer.cpp makes them."""
        for key in ("lr", "weight_decay"):
            if getattr(self, key) < 0:
                raise ProtocolError(f"{path}.{key}", f"{getattr(self, key)} is negative")
        if self.kind == "sgd":
            if self.momentum < 0:
                raise ProtocolError(f"{path}.momentum", f"{self.momentum} is negative")
            if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
                raise ProtocolError(f"{path}.nesterov", "nesterov needs a positive momentum and zero dampening")
            return
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ProtocolError(f"{path}.{key}", f"{getattr(self, key)} is outside [0, 1)")
        if self.eps <= 0:
            raise ProtocolError(f"{path}.eps", f"{self.eps} must be positive")

    def to_json(self) -> JSON:
        out: JSON = {"kind": self.kind}
        for key in _OPTIMIZER_RATIONALS:
            out[key] = format_rational(getattr(self, key))
        out["nesterov"] = self.nesterov
        out["missing_gradient_is_zero"] = self.missing_gradient_is_zero
        return {k: out[k] for k in ("kind", "lr", "weight_decay", "momentum", "dampening", "nesterov",
                                    "beta1", "beta2", "eps", "missing_gradient_is_zero")}


# ------------------------------------------------------------------------------------------- the engine


@dataclass(frozen=True)
class LossScaler:
    """models/loss_scaler.h (fp16 loss scaling); the kit carries it, the torch loop does not implement it."""

    initial_scale: Fraction
    dynamic: bool
    growth_interval: int
    growth_factor: Fraction
    backoff_factor: Fraction
    min_scale: Fraction

    @classmethod
    def from_json(cls, obj: object, path: str) -> LossScaler:
        r = {k: parse_rational(_field(obj, path, k), f"{path}.{k}")
             for k in ("initial_scale", "growth_factor", "backoff_factor", "min_scale")}
        return cls(dynamic=_bool(_field(obj, path, "dynamic"), f"{path}.dynamic"),
                   growth_interval=_int(_field(obj, path, "growth_interval"), f"{path}.growth_interval"), **r)

    def to_json(self) -> JSON:
        return {"initial_scale": format_rational(self.initial_scale), "dynamic": self.dynamic,
                "growth_interval": self.growth_interval, "growth_factor": format_rational(self.growth_factor),
                "backoff_factor": format_rational(self.backoff_factor),
                "min_scale": format_rational(self.min_scale)}


@dataclass(frozen=True)
class EngineConfig:
    """sim/scenario.h EngineConfig: ranks, configured G, ZeRO stage, offload, how the loop is driven."""

    rank_count: int = 1
    accumulation_steps: int = 1
    zero_stage: int = 0
    offload: bool = False
    bucket_element_count: int = 0
    boundary: str = "automatic"
    step_after_every_backward: bool = True
    precision: str = "full"
    loss_scaler: LossScaler | None = None

    @classmethod
    def from_json(cls, obj: object, path: str = "scenario.engine") -> EngineConfig:
        get = lambda key: _field(obj, path, key)  # noqa: E731
        assert isinstance(obj, dict)
        e = cls(
            rank_count=_int(get("rank_count"), f"{path}.rank_count", 1, RANK_COUNT_MAX),
            accumulation_steps=_int(get("accumulation_steps"), f"{path}.accumulation_steps", 1,
                                    ACCUMULATION_STEPS_MAX),
            zero_stage=_int(get("zero_stage"), f"{path}.zero_stage", 0, 3),
            offload=_bool(get("offload"), f"{path}.offload"),
            bucket_element_count=_int(obj.get("bucket_element_count", 0), f"{path}.bucket_element_count", 0),
            boundary=_choice(obj.get("boundary", "automatic"), f"{path}.boundary", BOUNDARIES),
            step_after_every_backward=_bool(obj.get("step_after_every_backward", True),
                                            f"{path}.step_after_every_backward"),
            precision=_choice(obj.get("precision", "full"), f"{path}.precision", PRECISIONS),
            loss_scaler=None if obj.get("loss_scaler") is None
            else LossScaler.from_json(obj["loss_scaler"], f"{path}.loss_scaler"),
        )
        if e.boundary == "automatic" and not e.step_after_every_backward and e.accumulation_steps != 1:
            raise ProtocolError(f"{path}.step_after_every_backward",
                                f"an automatic boundary with G = {e.accumulation_steps} needs step() after "
                                "every backward")
        return e

    def to_json(self) -> JSON:
        return {"rank_count": self.rank_count, "accumulation_steps": self.accumulation_steps,
                "zero_stage": self.zero_stage, "offload": self.offload,
                "bucket_element_count": self.bucket_element_count, "boundary": self.boundary,
                "step_after_every_backward": self.step_after_every_backward, "precision": self.precision,
                "loss_scaler": None if self.loss_scaler is None else self.loss_scaler.to_json()}


# --------------------------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class Sequence:
    """One sequence: T tokens. `features` [T, I] and `targets` [T, O] are floats (from `values`), exactly
    `exact_features` and `exact_targets` (given None or omitted: the floats' exact values, built when first
    read); `token_ids` [T] (tied_embedding), `expert_index` [T] (routed experts, else empty), `loss_mask` [T]
    of 0 and 1."""

    loss_mask: list[int]
    features: Matrix
    targets: Matrix
    token_ids: list[int] = field(default_factory=list)
    expert_index: list[int] = field(default_factory=list)
    exact_features: ExactMatrix = _ExactOf("features", _exact_of, default=True)
    exact_targets: ExactMatrix = _ExactOf("targets", _exact_of, default=True)

    @property
    def token_count(self) -> int:
        return len(self.loss_mask)

    @property
    def valid_token_count(self) -> int:
        return sum(self.loss_mask)

    def to_json(self) -> JSON:
        return {"features": _matrix_json(self.exact_features), "token_ids": list(self.token_ids),
                "expert_index": list(self.expert_index), "targets": _matrix_json(self.exact_targets),
                "loss_mask": list(self.loss_mask)}

    def values_json(self) -> JSON:
        return {"features": [list(r) for r in self.features], "targets": [list(r) for r in self.targets]}


def _sequence(spec: ModelSpec, obj: object, values: object, path: str, values_path: str, dtype: str,
              fast: _DyadicReader) -> Sequence:
    mask = _int_list(_field(obj, path, "loss_mask"), f"{path}.loss_mask")
    for t, m in enumerate(mask):
        if m not in (0, 1):
            raise ProtocolError(f"{path}.loss_mask[{t}]", f"{m} is not 0 or 1")
    T = len(mask)
    assert isinstance(obj, dict)
    token_ids: list[int] = []
    if spec.kind == "tied_embedding":
        token_ids = _int_list(_field(obj, path, "token_ids"), f"{path}.token_ids")
        if len(token_ids) != T:
            raise ProtocolError(f"{path}.token_ids", f"{len(token_ids)} entries for {T} tokens")
        for t, i in enumerate(token_ids):
            if not 0 <= i < spec.vocab_size:
                raise ProtocolError(f"{path}.token_ids[{t}]", f"id {i} is outside [0, {spec.vocab_size})")
    data = _dyadic_data(spec, obj, values, T, fast)
    # Without `data`, the readers below check (and name the problem) in the order they always have.
    exact_features = None
    if data is None and spec.feature_size == 0:
        exact_features = _exact_matrix(obj.get("features", [[] for _ in range(T)]), f"{path}.features", T, 0)
    elif data is None:
        exact_features = _exact_matrix(_field(obj, path, "features"), f"{path}.features", T, spec.input_size)
    expert_index = _int_list(obj.get("expert_index", []), f"{path}.expert_index")
    if spec.has_experts:
        if len(expert_index) != T:
            raise ProtocolError(f"{path}.expert_index", f"{len(expert_index)} entries for {T} tokens")
        for t, e in enumerate(expert_index):
            if not 0 <= e < spec.expert_count:
                raise ProtocolError(f"{path}.expert_index[{t}]",
                                    f"expert {e} is outside [0, {spec.expert_count})")
    if data is not None:
        return Sequence(mask, *data, token_ids, expert_index)
    assert exact_features is not None
    exact_targets = _exact_matrix(_field(obj, path, "targets"), f"{path}.targets", T, spec.target_size)
    if not isinstance(values, dict):
        raise ProtocolError(values_path, "expected an object with features and targets")
    features = _float_matrix(values.get("features", [[] for _ in range(T)]) if spec.feature_size == 0
                             else _field(values, values_path, "features"),
                             f"{values_path}.features", exact_features, dtype)
    targets = _float_matrix(_field(values, values_path, "targets"), f"{values_path}.targets", exact_targets, dtype)
    return Sequence(mask, features, targets, token_ids, expert_index, exact_features, exact_targets)


def _dyadic_data(spec: ModelSpec, obj: JSON, values: object, T: int,
                 fast: _DyadicReader) -> tuple[Matrix, Matrix] | None:
    """A sequence's float features and targets by the fast road, or None."""
    if type(values) is not dict or "targets" not in obj or "targets" not in values:
        return None
    if spec.feature_size == 0:
        no_features: list[list[Any]] = [[]] * T
        features = fast.matrix(obj.get("features", no_features), values.get("features", no_features), T, 0)
    elif "features" in obj and "features" in values:
        features = fast.matrix(obj["features"], values["features"], T, spec.input_size)
    else:
        return None
    targets = fast.matrix(obj["targets"], values["targets"], T, spec.target_size)
    return None if features is None or targets is None else (features, targets)


# ------------------------------------------------------------------------------------------ the scenario

Window = list[list[list[Sequence]]]  # [micro_batch k][rank r] -> sequences


@dataclass(frozen=True)
class Scenario:
    """The exact scenario of a run request, with the float values of its data.

    `steps[s][k][r]` is the list of sequences of rank r in micro-batch k of window (optimizer step) s.
    `initial_parameters` and `exact_initial_parameters` are keyed by parameter name, in model order (given
    None, `exact_initial_parameters` holds the floats' exact values, built when first read)."""

    model: ModelSpec
    aggregation: Aggregation
    optimizer: OptimizerSpec
    max_grad_norm: Fraction | None
    engine: EngineConfig
    initial_parameters: dict[str, Matrix]
    exact_initial_parameters: dict[str, ExactMatrix] = _ExactOf(
        "initial_parameters", _exact_of_parameters, default=False)
    steps: list[Window]
    checkpoint_after_step: int | None = None
    schedule_seed: int = 0

    def sequences(self, step: int) -> Iterator[Sequence]:
        """Every sequence of window `step`, every micro-batch, every rank: the oracle's global batch."""
        for ranks in self.steps[step]:
            for seqs in ranks:
                yield from seqs

    @property
    def token_count(self) -> int:
        return sum(seq.token_count for s in range(len(self.steps)) for seq in self.sequences(s))

    def hyperparameter(self, name: str) -> Fraction | None:
        """The exact value behind each key of values.training."""
        if name == "max_grad_norm":
            return self.max_grad_norm
        if name == "norm_constant":
            return self.aggregation.norm_constant
        return getattr(self.optimizer, name)

    @classmethod
    def from_json(cls, scenario: object, values: object, dtype: str) -> Scenario:
        p, vp = "scenario", "values"
        training = _field(scenario, p, "training")
        tp = f"{p}.training"
        model = ModelSpec.from_json(_field(training, tp, "model"), f"{tp}.model")
        aggregation = Aggregation.from_json(_field(training, tp, "aggregation"), f"{tp}.aggregation")
        optimizer = OptimizerSpec.from_json(_field(training, tp, "optimizer"), f"{tp}.optimizer")
        mgn = training.get("max_grad_norm")
        max_grad_norm = None if mgn is None else parse_rational(mgn, f"{tp}.max_grad_norm")
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ProtocolError(f"{tp}.max_grad_norm", f"{max_grad_norm} must be positive")
        engine = EngineConfig.from_json(_field(scenario, p, "engine"), f"{p}.engine")

        fast = _DyadicReader(dtype)
        exact_params: dict[str, ExactMatrix] = {}  # of the parameters the fast road did not accept
        params: dict[str, Matrix] = {}
        raw = _field(scenario, p, "initial_parameters")
        raw_values = _field(values, vp, "initial_parameters")
        for name, (rows, cols) in zip(model.parameter_names(), model.parameter_shapes(), strict=True):
            where = f"{p}.initial_parameters.{name}"
            exact = _field(raw, f"{p}.initial_parameters", name)
            floats = fast.matrix(exact, raw_values.get(name) if type(raw_values) is dict else None, rows, cols)
            if floats is not None:
                params[name] = floats
                continue
            exact_params[name] = _exact_matrix(exact, where, rows, cols)
            params[name] = _float_matrix(_field(raw_values, f"{vp}.initial_parameters", name),
                                         f"{vp}.initial_parameters.{name}", exact_params[name], dtype)
        for extra in (*raw, *raw_values):
            if extra not in params:
                raise ProtocolError(f"{p}.initial_parameters.{extra}", "not a parameter of this model")
        all_exact = None
        if exact_params:
            all_exact = {name: exact_params[name] if name in exact_params else _exact_of(m)
                         for name, m in params.items()}

        steps_json = _list(_field(scenario, p, "steps"), f"{p}.steps", "windows")
        steps_values = _list(_field(values, vp, "steps"), f"{vp}.steps", "windows")
        if len(steps_json) > STEP_COUNT_MAX:
            raise ProtocolError(f"{p}.steps", f"{len(steps_json)} steps exceed the bound of {STEP_COUNT_MAX}")
        if len(steps_values) != len(steps_json):
            raise ProtocolError(f"{vp}.steps", f"{len(steps_values)} windows for {len(steps_json)} in the scenario")
        steps: list[Window] = []
        for s, (window, window_values) in enumerate(zip(steps_json, steps_values, strict=True)):
            sp, svp = f"{p}.steps[{s}]", f"{vp}.steps[{s}]"
            window = _list(window, sp, "micro-batches")
            window_values = _list(window_values, svp, "micro-batches")
            _check_window_shape(engine, len(window), sp)
            if len(window_values) != len(window):
                raise ProtocolError(svp, f"{len(window_values)} micro-batches for {len(window)} in the scenario")
            micro_batches = []
            for k, (ranks, ranks_values) in enumerate(zip(window, window_values, strict=True)):
                kp, kvp = f"{sp}[{k}]", f"{svp}[{k}]"
                ranks = _list(ranks, kp, "ranks")
                ranks_values = _list(ranks_values, kvp, "ranks")
                if len(ranks) != engine.rank_count:
                    raise ProtocolError(kp, f"data for {len(ranks)} ranks, expected R = {engine.rank_count}")
                if len(ranks_values) != len(ranks):
                    raise ProtocolError(kvp, f"{len(ranks_values)} ranks for {len(ranks)} in the scenario")
                per_rank = []
                for r, (seqs, seqs_values) in enumerate(zip(ranks, ranks_values, strict=True)):
                    rp, rvp = f"{kp}[{r}]", f"{kvp}[{r}]"
                    seqs = _list(seqs, rp, "sequences")
                    seqs_values = _list(seqs_values, rvp, "sequences")
                    if len(seqs_values) != len(seqs):
                        raise ProtocolError(rvp, f"{len(seqs_values)} sequences for {len(seqs)} in the scenario")
                    per_rank.append([_sequence(model, q, qv, f"{rp}[{i}]", f"{rvp}[{i}]", dtype, fast)
                                     for i, (q, qv) in enumerate(zip(seqs, seqs_values, strict=True))])
                micro_batches.append(per_rank)
            steps.append(micro_batches)

        cas = scenario.get("checkpoint_after_step") if isinstance(scenario, dict) else None
        checkpoint_after_step = None
        if cas is not None:
            checkpoint_after_step = _int(cas, f"{p}.checkpoint_after_step")
            if not 0 <= checkpoint_after_step < len(steps):
                raise ProtocolError(f"{p}.checkpoint_after_step",
                                    f"{checkpoint_after_step} is not a step of this scenario")
        seed_text = _field(scenario, p, "schedule_seed")
        if not isinstance(seed_text, str) or not seed_text.isdigit() or int(seed_text) >= 2**64:
            raise ProtocolError(f"{p}.schedule_seed", f"expected a 64-bit unsigned decimal string, got {seed_text!r}")

        result = cls(model, aggregation, optimizer, max_grad_norm, engine, params, all_exact, steps,
                     checkpoint_after_step, int(seed_text))
        result._check_training_values(_field(values, vp, "training"), f"{vp}.training")
        return result

    def _check_training_values(self, obj: object, path: str) -> None:
        """values.training: each float must be the nearest double of its rational (null for no clipping)."""
        for key in ("lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps", "max_grad_norm",
                    "norm_constant"):
            value = _field(obj, path, key)
            exact = self.hyperparameter(key)
            if exact is None or value is None:
                if (exact is None) != (value is None):
                    raise ProtocolError(f"{path}.{key}", f"{value!r} where the scenario has {exact}")
                continue
            if parse_float(value, f"{path}.{key}") != float(exact):
                raise ProtocolError(f"{path}.{key}", f"{value!r} is not the nearest double of {exact}")

    def to_json(self) -> JSON:
        """The exact form, as sim/json/scenario_json.cpp writes it."""
        return {
            "training": {"model": self.model.to_json(), "aggregation": self.aggregation.to_json(),
                         "optimizer": self.optimizer.to_json(),
                         "max_grad_norm": None if self.max_grad_norm is None
                         else format_rational(self.max_grad_norm)},
            "engine": self.engine.to_json(),
            "initial_parameters": {n: _matrix_json(m) for n, m in self.exact_initial_parameters.items()},
            "steps": [[[[q.to_json() for q in seqs] for seqs in ranks] for ranks in window]
                      for window in self.steps],
            "checkpoint_after_step": self.checkpoint_after_step,
            "schedule_seed": str(self.schedule_seed),
        }

    def values_json(self) -> JSON:
        """The `values` object of a run request."""
        training: JSON = {}
        for key in ("lr", "weight_decay", "momentum", "dampening", "beta1", "beta2", "eps", "max_grad_norm",
                    "norm_constant"):
            exact = self.hyperparameter(key)
            training[key] = None if exact is None else float(exact)
        return {
            "initial_parameters": {n: [list(r) for r in m] for n, m in self.initial_parameters.items()},
            "steps": [[[[q.values_json() for q in seqs] for seqs in ranks] for ranks in window]
                      for window in self.steps],
            "training": training,
        }


def _check_window_shape(engine: EngineConfig, size: int, path: str) -> None:
    if size > MICRO_BATCHES_PER_WINDOW_MAX:
        raise ProtocolError(path, f"{size} micro-batches exceed the bound of {MICRO_BATCHES_PER_WINDOW_MAX}")
    if engine.boundary == "automatic" and engine.step_after_every_backward and size != engine.accumulation_steps:
        raise ProtocolError(path, f"{size} micro-batches but the automatic boundary needs exactly "
                                  f"G = {engine.accumulation_steps}")
    if size == 0 and (engine.boundary == "manual" or not engine.step_after_every_backward):
        raise ProtocolError(path, "no micro-batch: the boundary is decided at a backward, so a window needs one")


# ------------------------------------------------------------------------------------------- the request


@dataclass(frozen=True)
class Call:
    """One engine call (section 3): `{"call": "backward", "step": s, "micro_batch": k}`,
    `{"call": "set_boundary", "value": b}`, `{"call": "step"}`, `{"call": "end_window", "step": s}`,
    `{"call": "checkpoint", "step": s}`."""

    name: str
    step: int | None = None
    micro_batch: int | None = None
    value: bool | None = None

    @classmethod
    def from_json(cls, obj: object, path: str, scenario: Scenario) -> Call:
        name = _choice(_field(obj, path, "call"), f"{path}.call", CALLS)
        step = micro_batch = value = None
        if name in ("backward", "end_window", "checkpoint"):
            step = _int(_field(obj, path, "step"), f"{path}.step", 0, len(scenario.steps) - 1)
        if name == "backward":
            assert step is not None
            micro_batch = _int(_field(obj, path, "micro_batch"), f"{path}.micro_batch", 0,
                               len(scenario.steps[step]) - 1)
        if name == "set_boundary":
            value = _bool(_field(obj, path, "value"), f"{path}.value")
        return cls(name, step, micro_batch, value)

    def to_json(self) -> JSON:
        out: JSON = {"call": self.name}
        for key in ("step", "micro_batch", "value"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class RunRequest:
    """`{"type": "run", "id": ..., "dtype": ..., "scenario": ..., "values": ..., "calls": [...]}`."""

    id: int
    dtype: str
    scenario: Scenario
    calls: list[Call]

    @classmethod
    def from_json(cls, msg: object) -> RunRequest:
        if not isinstance(msg, dict) or msg.get("type") != "run":
            raise ProtocolError("type", "expected a run request")
        request_id = _int(_field(msg, "", "id"), "id", 0, 2**63 - 1)
        dtype = _choice(_field(msg, "", "dtype"), "dtype", DTYPES)
        scenario = Scenario.from_json(_field(msg, "", "scenario"), _field(msg, "", "values"), dtype)
        calls = [Call.from_json(c, f"calls[{i}]", scenario)
                 for i, c in enumerate(_list(_field(msg, "", "calls"), "calls", "engine calls"))]
        return cls(request_id, dtype, scenario, calls)

    def to_json(self) -> JSON:
        return {"type": "run", "id": self.id, "dtype": self.dtype, "scenario": self.scenario.to_json(),
                "values": self.scenario.values_json(), "calls": [c.to_json() for c in self.calls]}


def engine_calls(scenario: Scenario) -> list[Call]:
    """The engine calls of a scenario in the order of section 3 (the C++ client's engine_calls): for each
    window, per micro-batch [set_boundary (manual only)] backward [step (step_after_every_backward)], then
    step (once-per-window loops), end_window, and checkpoint after step `checkpoint_after_step`."""
    e = scenario.engine
    calls: list[Call] = []
    for s, window in enumerate(scenario.steps):
        for k in range(len(window)):
            if e.boundary == "manual":
                calls.append(Call("set_boundary", value=k == len(window) - 1))
            calls.append(Call("backward", step=s, micro_batch=k))
            if e.step_after_every_backward:
                calls.append(Call("step"))
        if not e.step_after_every_backward:
            calls.append(Call("step"))
        calls.append(Call("end_window", step=s))
        if scenario.checkpoint_after_step == s:
            calls.append(Call("checkpoint", step=s))
    return calls
