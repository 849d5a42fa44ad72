"""torch-loop's mixed precision (adapters/torch-loop/adapter.py, AutocastLoop): what CPU autocast computes in
16 bits on torch 2.6, fp32 master weights, .grad and optimizer state, and the scenarios it declines."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import subprocess
import sys
from fractions import Fraction as Q

import pytest
import reference
from builders import request, seq
from cases import random_request
from conftest import ADAPTERS, HAS_TORCH, fixture, requires_torch

from accumcheck_adapter import ModelSpec, RunRequest, Unsupported
from accumcheck_adapter.scenario import LossScaler, OptimizerSpec

if HAS_TORCH:
    import torch

pytestmark = requires_torch

BITS = {"bf16": 8, "fp16": 11}  # significand bits with the hidden one


def load_adapter():
    spec = importlib.util.spec_from_file_location("torch_loop_adapter", ADAPTERS / "torch-loop" / "adapter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_precision(r: RunRequest, precision: str, dtype: str = "fp32", loss_scaler: LossScaler | None = None):
    engine = dataclasses.replace(r.scenario.engine, precision=precision, loss_scaler=loss_scaler)
    draft = RunRequest(r.id, dtype, dataclasses.replace(r.scenario, engine=engine), r.calls)
    return RunRequest.from_json(draft.to_json())


def one_token(weight: Q, lr: Q = Q(1, 4)) -> RunRequest:
    """Linear 1 -> 1, weight `weight`, bias 0, one token x = 1, target 0, SGD: gradient = prediction."""
    return request(ModelSpec("linear", 1, 1), {"weight": [[weight]], "bias": [[0]]}, [[[[seq([[1]], [[0]])]]]],
                   dtype="fp32", optimizer=OptimizerSpec("sgd", lr=lr))


def test_the_adapter_declares_bf16_and_fp16_without_loss_scaling():
    caps = load_adapter().AutocastLoop.CAPABILITIES
    assert (caps.precisions, caps.loss_scaling, caps.dtypes) == (("full", "bf16", "fp16"), False, ("fp32", "fp64"))
    messages = [fixture("hello.request.json"), {"type": "shutdown"}]
    done = subprocess.run([sys.executable, "adapter.py"], input="".join(json.dumps(m) + "\n" for m in messages),
                          capture_output=True, text=True, timeout=120, cwd=ADAPTERS / "torch-loop", check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["capabilities"] == caps.to_json()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cpu_autocast_computes_only_the_matmuls_in_16_bits(precision):
    """What the adapter's header states: matmul is on CPU autocast's lower-precision list, the ops around it
    have no policy and follow type promotion, so the bias add brings the prediction back to fp32."""
    low = load_adapter().AUTOCAST_DTYPES[precision]
    x, w, b = torch.randn(3, 4), torch.randn(5, 4, requires_grad=True), torch.randn(5, 1, requires_grad=True)
    with torch.autocast(device_type="cpu", dtype=low):
        product = x @ w.T
        prediction = product + b.T
        hidden = torch.relu(prediction)
        loss = (0.5 * (hidden - 1) ** 2).sum(dim=1)
        rows = w.index_select(0, torch.tensor([1, 0]))
        assert (product.dtype, (product * 2).dtype, (product**2).dtype, torch.relu(product).dtype) == (low,) * 4
        assert (prediction.dtype, hidden.dtype, loss.dtype, rows.dtype) == (torch.float32,) * 4
    loss.sum().backward()
    assert (w.grad.dtype, b.grad.dtype) == (torch.float32, torch.float32)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_cpu_gemm_accumulates_in_fp32_and_rounds_once(precision):
    low = load_adapter().AUTOCAST_DTYPES[precision]
    gen = torch.Generator().manual_seed(0)
    for k in (1, 2, 7, 64, 1000):
        x, w = torch.randn(5, k, generator=gen), torch.randn(6, k, generator=gen)
        with torch.autocast(device_type="cpu", dtype=low):
            got = x @ w.T
        rounded_exact = (x.to(low).double() @ w.to(low).double().T).to(low)
        assert torch.equal(got, rounded_exact), k


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_16_bit_compute_with_fp32_master_weights(precision):
    """weight = 1 + 2^-p needs p + 1 significand bits: autocast rounds its copy to 1 (ties to even), so the
    weight gradient is 1, while the fp32 master weight keeps the low bit through the update."""
    adapter = load_adapter()
    tiny = Q(1, 2 ** BITS[precision])
    r = with_precision(one_token(1 + tiny), precision)
    loop = adapter.AutocastLoop(r)
    result = loop.run()
    assert result.steps[0].gradient == {"weight": [[1.0]], "bias": [[1.0]]}
    assert result.parameters == {"weight": [[float(1 + tiny - Q(1, 4))]], "bias": [[-0.25]]}
    assert {p.dtype for p in loop.model.parameters()} == {torch.float32}
    full = adapter.AutocastLoop(with_precision(r, "full")).run()
    assert full.steps[0].gradient == {"weight": [[float(1 + tiny)]], "bias": [[float(1 + tiny)]]}


def test_optimizer_state_and_gradients_stay_fp32():
    adapter = load_adapter()
    rng = random.Random("bf16-state")
    adam = OptimizerSpec("adam", lr=Q(1, 8), beta1=Q(1, 2), beta2=Q(3, 4), eps=Q(1, 8))
    r = with_precision(random_request(rng, "mlp", steps=2, optimizer=adam, dtype="fp32"), "bf16")
    loop = adapter.AutocastLoop(r)
    seen = []
    original = loop.optimizer.step

    def step(*args, **kwargs):
        seen.extend(p.grad.dtype for p in loop.model.parameters() if p.grad is not None)
        return original(*args, **kwargs)

    loop.optimizer.step = step
    loop.run()
    assert set(seen) <= {torch.float32}
    tensors = [v for state in loop.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    assert tensors and {t.dtype for t in tensors} == {torch.float32}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("kind", ["linear", "mlp", "tied_embedding"])
@pytest.mark.parametrize("seed", range(4))
def test_16_bit_runs_stay_near_the_oracle(precision, kind, seed):
    """A coarse sanity check (the derived bound is accumcheck's job): halves in [-2, 2], one SGD step."""
    adapter = load_adapter()
    r = with_precision(random_request(random.Random(f"{precision}-{kind}-{seed}"), kind, dtype="fp32"), precision)
    result = adapter.AutocastLoop(r).run()
    truth = reference.oracle(r.scenario)
    for name, want in truth["parameters"].items():
        for got_row, want_row in zip(result.parameters[name], want, strict=True):
            for got, exact in zip(got_row, want_row, strict=True):
                assert abs(got - float(exact)) <= 0.05 * (1 + abs(float(exact))), (name, got, exact)


def test_full_precision_is_the_plain_loop():
    adapter = load_adapter()
    from accumcheck_adapter import TorchLoop

    r = random_request(random.Random("full"), "tied_embedding", steps=2, dtype="fp32")
    assert adapter.AutocastLoop(r).run() == TorchLoop(r).run()


def test_it_declines_16_bits_without_fp32_master_weights_and_loss_scaling():
    adapter = load_adapter()
    with pytest.raises(Unsupported, match="fp32 master weights"):
        adapter.AutocastLoop(with_precision(one_token(Q(1)), "bf16", dtype="fp64"))
    scaler = LossScaler(Q(2**16), True, 1000, Q(2), Q(1, 2), Q(1))
    with pytest.raises(Unsupported, match="loss scaling"):
        adapter.AutocastLoop(with_precision(one_token(Q(1)), "fp16", loss_scaler=scaler))
