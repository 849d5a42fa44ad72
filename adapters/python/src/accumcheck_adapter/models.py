"""The three synthetic models of models/ as torch.nn.Modules, so that autograd gives the C++ models' gradients
and the same pattern of present and absent gradients (docs/adapter-protocol.md section 5):

  linear, E = 1:   weight [O, I], bias [O, 1]                          prediction W x_t + b
  linear, E > 1:   expert{e}.weight [O, I], expert{e}.bias [O, 1]      W_e x_t + b_e, e = expert_index[t]
  mlp:             fc1.weight [H, I], fc1.bias [H, 1], fc2.weight [O, H], fc2.bias [O, 1]
                                                                       W2 relu(W1 x_t + b1) + b2
  tied_embedding:  embedding [V, D], bias [V, 1]                       E E[id_t] + b (E used twice)

Biases keep the spec's [rows, 1] shape, so gradients and optimizer state are reported as the C++ side
shapes them. The forward returns the per-token loss l_t = 1/2 sum_o (prediction_to - target_to)^2 of every
token (masked or not) of a list of sequences, concatenated in order; the loss aggregation weighs it.

Presence follows from the graph: every token, masked or not, goes through its layer's forward, so its layer
gets a gradient (zeros if every token is masked); a routed expert that no token reached is skipped (no
empty index_select runs through it), so its .grad stays None; a batch without tokens still runs the dense
layers on a [0, I] tensor, which gives them zero gradients. Frozen parameters have requires_grad False.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as Seq
from fractions import Fraction

import torch
from torch import nn

from accumcheck_adapter.exact import round_to_dtype
from accumcheck_adapter.scenario import Matrix, ModelSpec, Sequence

_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """"fp32" / "fp64" (the protocol's names) or a torch float dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ValueError(f"dtype: {dtype} is not float32 or float64")
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not 'fp32' or 'fp64' (a torch model does not compute exactly)")
    return _DTYPES[dtype]


def _dtype_name(dtype: torch.dtype) -> str:
    return "fp32" if dtype == torch.float32 else "fp64"


def _rows(sequences: Seq[Sequence], attribute: str, width: int, dtype: torch.dtype) -> torch.Tensor:
    rows = [row for seq in sequences for row in getattr(seq, attribute)]
    return torch.tensor(rows, dtype=dtype).reshape(len(rows), width)


def _ints(sequences: Seq[Sequence], attribute: str) -> torch.Tensor:
    return torch.tensor([i for seq in sequences for i in getattr(seq, attribute)], dtype=torch.long)


def token_mask(sequences: Seq[Sequence], dtype: str | torch.dtype) -> torch.Tensor:
    """loss_mask of every token, concatenated in order, as floats [N]."""
    return torch.tensor([m for seq in sequences for m in seq.loss_mask], dtype=torch_dtype(dtype))


def token_weights(sequences: Seq[Sequence], coefficients: Seq[Fraction], dtype: str | torch.dtype) -> torch.Tensor:
    """c_i M_it for every token [N]: c_i rounded once from its exact value into dtype (as the C++ side
    rounds 1/N), times the mask."""
    t = torch_dtype(dtype)
    if len(coefficients) != len(sequences):
        raise ValueError(f"coefficients: {len(coefficients)} for {len(sequences)} sequences")
    weights = [round_to_dtype(c, _dtype_name(t)) * m
               for seq, c in zip(sequences, coefficients, strict=True) for m in seq.loss_mask]
    return torch.tensor(weights, dtype=t)


def _half_squared_error(prediction: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((prediction - targets) ** 2).sum(dim=1)


class _Affine(nn.Module):
    """x W^T + b^T with W [O, I] and b [O, 1]."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T + self.bias.T


class SyntheticModel(nn.Module):
    """Base of the three models: `spec`, `dtype`, and forward(sequences) -> per-token losses [N]."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype) -> None:
        super().__init__()
        self.spec = spec
        self.dtype = dtype

    def forward(self, sequences: Seq[Sequence]) -> torch.Tensor:
        raise NotImplementedError


class LinearModel(SyntheticModel):
    def __init__(self, spec: ModelSpec, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype) -> None:
        super().__init__(spec, dtype)
        self.weight = nn.Parameter(tensors["weight"])
        self.bias = nn.Parameter(tensors["bias"])

    def forward(self, sequences: Seq[Sequence]) -> torch.Tensor:
        x = _rows(sequences, "features", self.spec.input_size, self.dtype)
        y = _rows(sequences, "targets", self.spec.output_size, self.dtype)
        return _half_squared_error(x @ self.weight.T + self.bias.T, y)


class ExpertLinearModel(SyntheticModel):
    """Routed experts: token t goes through expert expert_index[t] only."""

    def __init__(self, spec: ModelSpec, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype) -> None:
        super().__init__(spec, dtype)
        for e in range(spec.expert_count):
            self.add_module(f"expert{e}", _Affine(tensors[f"expert{e}.weight"], tensors[f"expert{e}.bias"]))

    def forward(self, sequences: Seq[Sequence]) -> torch.Tensor:
        x = _rows(sequences, "features", self.spec.input_size, self.dtype)
        y = _rows(sequences, "targets", self.spec.output_size, self.dtype)
        route = _ints(sequences, "expert_index")
        losses, positions = [], []
        for e in range(self.spec.expert_count):
            idx = (route == e).nonzero().flatten()
            if idx.numel() == 0:
                continue  # no token reached expert e: it stays out of the graph and its .grad None
            expert = self.get_submodule(f"expert{e}")
            losses.append(_half_squared_error(expert(x.index_select(0, idx)), y.index_select(0, idx)))
            positions.append(idx)
        if not losses:
            return x.new_zeros(0)
        order = torch.cat(positions)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel())
        return torch.cat(losses)[inverse]


class MlpModel(SyntheticModel):
    def __init__(self, spec: ModelSpec, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype) -> None:
        super().__init__(spec, dtype)
        self.fc1 = _Affine(tensors["fc1.weight"], tensors["fc1.bias"])
        self.fc2 = _Affine(tensors["fc2.weight"], tensors["fc2.bias"])

    def forward(self, sequences: Seq[Sequence]) -> torch.Tensor:
        x = _rows(sequences, "features", self.spec.input_size, self.dtype)
        y = _rows(sequences, "targets", self.spec.output_size, self.dtype)
        return _half_squared_error(self.fc2(torch.relu(self.fc1(x))), y)  # relu'(0) = 0 in torch


class TiedEmbeddingModel(SyntheticModel):
    def __init__(self, spec: ModelSpec, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype) -> None:
        super().__init__(spec, dtype)
        self.embedding = nn.Parameter(tensors["embedding"])
        self.bias = nn.Parameter(tensors["bias"])

    def forward(self, sequences: Seq[Sequence]) -> torch.Tensor:
        ids = _ints(sequences, "token_ids")
        y = _rows(sequences, "targets", self.spec.vocab_size, self.dtype)
        rows = self.embedding.index_select(0, ids)  # input use of E
        return _half_squared_error(rows @ self.embedding.T + self.bias.T, y)  # output use of the same E


def build_model(spec: ModelSpec, parameters: Mapping[str, Matrix], dtype: str | torch.dtype) -> SyntheticModel:
    """The model of `spec` with `parameters` (by name, as Scenario.initial_parameters) in dtype; parameter
    names and order are the spec's, frozen ones have requires_grad False."""
    t = torch_dtype(dtype)
    tensors = {}
    for name, (rows, cols) in zip(spec.parameter_names(), spec.parameter_shapes(), strict=True):
        if name not in parameters:
            raise ValueError(f"parameters.{name}: missing")
        tensors[name] = torch.tensor(parameters[name], dtype=t).reshape(rows, cols)
    kinds = {"linear": ExpertLinearModel if spec.has_experts else LinearModel, "mlp": MlpModel,
             "tied_embedding": TiedEmbeddingModel}
    model = kinds[spec.kind](spec, tensors, t)
    names = [name for name, _ in model.named_parameters()]
    assert names == spec.parameter_names(), (names, spec.parameter_names())
    for name, p in model.named_parameters():
        p.requires_grad_(not spec.is_frozen(name))
    return model
