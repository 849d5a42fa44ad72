"""Decoding and encoding run requests: the fixtures, round trips, and errors that name the JSON path."""

from __future__ import annotations

import copy
import dataclasses
import random
from fractions import Fraction

import cases
import pytest
from builders import request, seq
from conftest import fixture

from accumcheck_adapter import Call, ModelSpec, ProtocolError, RunRequest, Scenario, Sequence, engine_calls
from accumcheck_adapter import scenario as scenario_module


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


# ------------------------------------------------------------------------------ the fast road of the data


def _data_texts(raw: dict, rewrite) -> None:
    """Applies rewrite to every rational text of the scenario's data (initial parameters, features, targets)."""
    s = raw["scenario"]
    matrices = list(s["initial_parameters"].values())
    matrices += [q[key] for w in s["steps"] for ranks in w for seqs in ranks for q in seqs
                 for key in ("features", "targets") if key in q]
    for m in matrices:
        for row in m:
            row[:] = [rewrite(x) for x in row]


def _slow(monkeypatch) -> None:
    """Every data matrix through the readers that name problems, as before the fast road."""
    monkeypatch.setattr(scenario_module._DyadicReader, "matrix", lambda *_: None)


@pytest.mark.parametrize("seed", range(12))
def test_the_fast_road_decodes_as_the_readers_do(seed, monkeypatch):
    rng = random.Random(seed)
    kind, dtype = ("linear", "mlp", "tied_embedding")[seed % 3], ("fp32", "fp64", "exact")[seed % 3]
    raw = cases.random_request(rng, kind, steps=2, dtype=dtype).to_json()
    with monkeypatch.context() as m:  # what the C++ side writes takes the fast road only
        m.setattr(scenario_module, "_exact_matrix", lambda *_: pytest.fail("a reader was asked"))
        fast = RunRequest.from_json(copy.deepcopy(raw))
    # Texts and numbers only the readers accept: not in lowest terms, JSON integers on both sides.
    other = copy.deepcopy(raw)
    _data_texts(other, lambda x: f"{3 * Fraction(x).numerator}/{3 * Fraction(x).denominator}")
    ints = copy.deepcopy(raw)
    _data_texts(ints, lambda x: int(x) if Fraction(x).denominator == 1 else x)
    for m in ints["values"]["initial_parameters"].values():
        for row in m:
            row[:] = [int(f) if f == int(f) else f for f in row]
    _slow(monkeypatch)
    slow = RunRequest.from_json(copy.deepcopy(raw))
    assert fast == slow == RunRequest.from_json(other) == RunRequest.from_json(ints)
    assert fast.to_json() == raw
    s = fast.scenario
    every_float = [f for m in s.initial_parameters.values() for row in m for f in row]
    every_float += [f for w in range(len(s.steps)) for q in s.sequences(w) for m in (q.features, q.targets)
                    for row in m for f in row]
    assert all(type(f) is float for f in every_float)
    exact = [x for m in s.exact_initial_parameters.values() for row in m for x in row]
    exact += [x for w in range(len(s.steps)) for q in s.sequences(w) for m in (q.exact_features, q.exact_targets)
              for row in m for x in row]
    assert all(type(x) is Fraction for x in exact) and exact == every_float


@pytest.mark.parametrize("slow", [False, True])
@pytest.mark.parametrize(("text", "value", "message"), [
    ("-1/4", -0.5, "-0.5 is not exactly the scenario's -1/4"),
    ("1/3", 1 / 3, "0.3333333333333333 is not exactly the scenario's 1/3"),  # no float is 1/3
    ("-10", -10.000000000000002, "-10.000000000000002 is not exactly the scenario's -10"),
    ("1/1267650600228229401496703205376", 0.0, "0.0 is not exactly the scenario's 1/1267650600228229401496703205376"),
    ("0", "nan", "nan is not exactly the scenario's 0"),
    ("10", "inf", "inf is not exactly the scenario's 10"),
    ("1", True, "expected a number, got True"),
    ("1", "1", "expected a number, got '1'"),
    ("1", 10**400, "beyond the range of a double"),
    ("1073741825", 1073741825.0, "1073741825.0 is not representable in fp32"),  # 2^30 + 1
])
def test_a_data_value_that_is_not_its_rational_is_named_with_both(slow, text, value, message, monkeypatch):
    raw = copy.deepcopy(catalogue())  # fp32
    raw["scenario"]["steps"][1][2][0][0]["targets"] = [[text]]
    raw["values"]["steps"][1][2][0][0]["targets"] = [[value]]
    if slow:
        _slow(monkeypatch)
    with pytest.raises(ProtocolError) as e:
        RunRequest.from_json(raw)
    assert e.value.path == "values.steps[1][2][0][0].targets[0][0]"
    assert message in str(e.value)


@pytest.mark.parametrize(("text", "value"), [("3/3", 1.0), ("-6/8", -0.75), ("1.5", 1.5), (" 1", 1), ("+2", 2.0),
                                             (4, 4.0), ("1/1099511627776", 2.0**-40), ("-0", -0.0)])
def test_data_the_readers_accept_is_accepted(text, value):
    raw = copy.deepcopy(catalogue())
    raw["scenario"]["initial_parameters"]["weight"] = [[text]]
    raw["values"]["initial_parameters"]["weight"] = [[value]]
    s = RunRequest.from_json(raw).scenario
    assert s.initial_parameters["weight"] == [[value]] and type(s.initial_parameters["weight"][0][0]) is float
    assert s.exact_initial_parameters["weight"] == [[Fraction(value)]]
    assert s.exact_initial_parameters["bias"] == [[Fraction(0)]]


@pytest.mark.parametrize(("edit", "path"), [
    (lambda m: m["scenario"]["steps"][0][0][0][0].pop("features"), "scenario.steps[0][0][0][0].features"),
    (lambda m: m["values"]["steps"][0][0][0][0].pop("features"), "values.steps[0][0][0][0].features"),
    (lambda m: m["values"]["steps"][0][0][0][0].pop("targets"), "values.steps[0][0][0][0].targets"),
    (lambda m: m["values"]["steps"][0][0][0].__setitem__(0, [1.0]), "values.steps[0][0][0][0]"),
    (lambda m: m["values"]["steps"][0][0][0][0]["targets"].append([1.0]), "values.steps[0][0][0][0].targets"),
    (lambda m: m["values"]["steps"][0][0][0][0]["targets"][0].append(1.0), "values.steps[0][0][0][0].targets[0]"),
    (lambda m: m["scenario"]["steps"][0][0][0][0]["features"][0].__setitem__(0, 1.0),
     "scenario.steps[0][0][0][0].features[0][0]"),
    (lambda m: m["scenario"]["steps"][0][0][0][0]["features"][0].__setitem__(0, "1/0"),
     "scenario.steps[0][0][0][0].features[0][0]"),
    # The order of the checks is the readers': the scenario's matrices, the expert index, then the values.
    (lambda m: (m["scenario"]["steps"][0][0][0][0]["targets"][0].__setitem__(0, "x"),
                m["values"]["steps"][0][0][0][0]["features"][0].__setitem__(0, 2.0)),
     "scenario.steps[0][0][0][0].targets[0][0]"),
    (lambda m: m["values"]["initial_parameters"].pop("bias"), "values.initial_parameters.bias"),
    (lambda m: (m["values"]["initial_parameters"].pop("bias"), m["scenario"]["initial_parameters"]["bias"][0]
                .__setitem__(0, "y")), "scenario.initial_parameters.bias[0][0]"),
    (lambda m: m["values"]["initial_parameters"].__setitem__("gamma", [[0.0]]), "scenario.initial_parameters.gamma"),
])
def test_a_malformed_data_matrix_names_the_path(edit, path):
    raw = copy.deepcopy(catalogue())
    edit(raw)
    with pytest.raises(ProtocolError) as e:
        RunRequest.from_json(raw)
    assert e.value.path == path, str(e.value)


def test_exact_values_are_the_given_ones_or_the_floats_own():
    built = Sequence([1], [[0.5]], [[0.1]])  # no exact values: the floats' own
    assert built.exact_features == [[Fraction(1, 2)]] and built.exact_targets == [[Fraction(0.1)]]
    given = Sequence([1], [[0.5]], [[0.1]], exact_features=[[Fraction(1, 2)]], exact_targets=[[Fraction(1, 10)]])
    assert given.exact_targets == [[Fraction(1, 10)]] and given != built
    assert dataclasses.replace(given, loss_mask=[0]).exact_targets == [[Fraction(1, 10)]]
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.exact_targets = []  # type: ignore[misc]
    decoded = RunRequest.from_json(catalogue()).scenario
    assert decoded.steps[0][1][0][0].exact_targets == [[Fraction(-10)]]
    assert decoded.exact_initial_parameters == {"weight": [[Fraction(0)]], "bias": [[Fraction(0)]]}
    assert [f.name for f in dataclasses.fields(Sequence)][-2:] == ["exact_features", "exact_targets"]
    with pytest.raises(TypeError, match="exact_initial_parameters"):
        Scenario(decoded.model, decoded.aggregation, decoded.optimizer, None, decoded.engine,  # type: ignore[call-arg]
                 decoded.initial_parameters, steps=[])
