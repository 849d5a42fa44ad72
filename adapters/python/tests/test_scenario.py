"""Decoding and encoding run requests: the fixtures, round trips, and errors that name the JSON path."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
from builders import request, seq
from conftest import fixture

from accumcheck_adapter import Call, ModelSpec, ProtocolError, RunRequest, engine_calls


def catalogue() -> dict:
    return fixture("run.catalogue-g3.request.json")


def test_the_catalogue_request_decodes():
    r = RunRequest.from_json(catalogue())
    s = r.scenario
    assert (r.id, r.dtype) == (1, "fp32")
    assert s.model == ModelSpec("linear", 1, 1, frozen=("bias",))
    assert s.model.parameter_names() == ["weight", "bias"]
    assert (s.aggregation.mode, s.optimizer.kind, s.optimizer.lr) == ("sum", "sgd", Fraction(1, 8))
    assert s.max_grad_norm is None
    assert s.optimizer.eps == Fraction(1, 10**8)  # not dyadic, and fine: only its nearest double is checked
    assert s.engine.accumulation_steps == 3 and s.engine.boundary == "automatic"
    targets = [[q.targets for ranks in w for seqs in ranks for q in seqs] for w in s.steps]
    assert targets == [[[[-1.0]], [[-10.0]], [[-100.0]]]] * 2
    assert s.steps[0][2][0][0].exact_targets == [[Fraction(-100)]]
    assert r.calls[:3] == [Call("backward", 0, 0), Call("step"), Call("backward", 0, 1)]
    assert r.calls == engine_calls(s)


def test_the_catalogue_request_round_trips_exactly():
    raw = catalogue()
    assert RunRequest.from_json(raw).to_json() == raw


def test_a_request_built_in_python_round_trips():
    spec = ModelSpec("tied_embedding", vocab_size=3, embed_size=2, frozen=("bias",))
    r = request(spec, {"embedding": [["1/2", 0], [1, -1], [0, "3/4"]], "bias": [[0], [1], [2]]},
                [[[[seq([[], []], [[0, 1, 0], [1, 0, 0]], [1, 0], token_ids=[2, 0])]],
                  [[seq([], [], [])]]]],
                aggregation="seq-mean-token-sum-norm", norm_constant=4, checkpoint_after_step=0)
    again = RunRequest.from_json(r.to_json())
    assert again == r
    assert again.scenario.exact_initial_parameters["embedding"][0][0] == Fraction(1, 2)
    assert again.calls[-1] == Call("checkpoint", step=0)


@pytest.mark.parametrize(("edit", "path"), [
    (lambda m: m["scenario"]["steps"][1][2][0][0]["targets"].append(["1"]), "scenario.steps[1][2][0][0].targets"),
    (lambda m: m["values"]["steps"][0][1][0][0]["targets"][0].__setitem__(0, -10.5),
     "values.steps[0][1][0][0].targets[0][0]"),
    (lambda m: m["scenario"]["training"]["model"].__setitem__("frozen", ["beta"]), "scenario.training.model.frozen"),
    (lambda m: m["scenario"]["training"]["aggregation"].__setitem__("mode", "mean"),
     "scenario.training.aggregation.mode"),
    (lambda m: m["scenario"]["initial_parameters"].__setitem__("weight", [["x"]]),
     "scenario.initial_parameters.weight[0][0]"),
    (lambda m: m["scenario"]["engine"].__setitem__("rank_count", 0), "scenario.engine.rank_count"),
    (lambda m: m["scenario"]["steps"][0].pop(), "scenario.steps[0]"),  # automatic boundary needs G
    (lambda m: m["values"]["training"].__setitem__("lr", 0.1), "values.training.lr"),
    (lambda m: m["calls"][0].__setitem__("micro_batch", 3), "calls[0].micro_batch"),
    (lambda m: m["calls"][0].__setitem__("call", "jump"), "calls[0].call"),
    (lambda m: m.__setitem__("dtype", "fp16"), "dtype"),
    (lambda m: m["scenario"].pop("schedule_seed"), "scenario.schedule_seed"),
])
def test_a_malformed_request_names_the_path(edit, path):
    raw = copy.deepcopy(catalogue())
    edit(raw)
    with pytest.raises(ProtocolError) as e:
        RunRequest.from_json(raw)
    assert e.value.path == path, str(e.value)


def test_fp32_requests_need_values_that_are_float32():
    raw = copy.deepcopy(catalogue())
    raw["scenario"]["initial_parameters"]["weight"] = [["1/1099511627776"]]  # 2^-40: fine in fp32
    raw["values"]["initial_parameters"]["weight"] = [[2.0**-40]]
    RunRequest.from_json(raw)
    raw["scenario"]["initial_parameters"]["weight"] = [[str(2**30 + 1)]]
    raw["values"]["initial_parameters"]["weight"] = [[float(2**30 + 1)]]
    with pytest.raises(ProtocolError, match="not representable in fp32"):
        RunRequest.from_json(raw)
    raw["dtype"] = "fp64"
    RunRequest.from_json(raw)
