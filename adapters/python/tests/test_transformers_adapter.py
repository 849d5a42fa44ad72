"""The real-Trainer adapter (adapters/transformers) as a process, against each installed transformers release: under
the token mean, with micro-batches of different valid-token counts, 4.45.2 applies the mean of the micro-batch means
(each micro-batch's own token mean, divided by G: the gradient-accumulation normalisation bug,
shared/bug-catalogue.md section 4) and 4.46.3 and 5.24.0 the window's token mean (num_items_in_batch); with equal
counts every release applies the window's token mean. Each release needs scripts/transformers-env.sh; a missing one
is skipped with the command that installs it.

The scenario: the linear model's weight w (its bias frozen), w = 0, x = 1, per-token loss 1/2 (w - y)^2, so a
token with target y has gradient -y. Micro-batch 0 has one valid token with gradient a; micro-batch 1 three valid
tokens with gradient b each and one masked token. G = 2, one window, SGD lr 1/8.
  window token mean          (a + 3 b) / 4
  mean of micro-batch means  (a / 1 + 3 b / 3) / 2 = (a + b) / 2
With a = 4, b = 8: 7 against 6; every value is an integer, exact in fp32.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from fractions import Fraction

import pytest
from conftest import ADAPTERS, HAS_TORCH

from accumcheck_adapter import ModelSpec, RunRequest, Scenario, Sequence, engine_calls
from accumcheck_adapter.scenario import Aggregation, EngineConfig, OptimizerSpec

# adapters/transformers/release.py under a name of its own: adapters/deepspeed has a release.py too, and the
# whole kit's pytest session imports both.
_spec = importlib.util.spec_from_file_location("transformers_release", ADAPTERS / "transformers" / "release.py")
release = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(release)

# The releases of adapters/transformers-*/adapter.json, and whether each divides every micro-batch's own mean by G.
MEAN_OF_MEANS = {"4.45.2": True, "4.46.3": False, "5.24.0": False}
FRONT = ADAPTERS / "transformers" / "adapter.py"
HELLO = {"type": "hello", "id": 0, "protocol": 1, "client": "pytest"}
LR = Fraction(1, 8)


def needs(version: str) -> None:
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    if not release.installed(version):
        pytest.skip(f"needs transformers {version}: run {release.install_command(version)}")


def converse(version: str, *requests: RunRequest) -> list[dict]:
    """Runs the adapter for one release over the handshake and these requests; returns the replies after hello."""
    lines = [HELLO, *(r.to_json() for r in requests), {"type": "shutdown"}]
    done = subprocess.run([sys.executable, str(FRONT), "--version", version], check=False, timeout=600,
                          input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    replies = [json.loads(x) for x in done.stdout.splitlines()]
    assert replies[0]["adapter"]["name"] == f"transformers-{version}"
    assert len(replies) == len(requests) + 1, done.stderr[-4000:]
    return replies[1:]


def micro_batch(gradient: int, valid: int, masked: int = 0) -> list[Sequence]:
    """One sequence: `valid` tokens whose gradient at w = 0 is `gradient`, then `masked` tokens (target -100)."""
    mask = [1] * valid + [0] * masked
    targets = [[float(-gradient)]] * valid + [[-100.0]] * masked
    return [Sequence(mask, [[1.0]] * len(mask), targets)]


def request(micro_batches: list[list[Sequence]], *, windows: int = 1, request_id: int = 1,
            accumulation_steps: int | None = None, aggregation: str = "token-mean") -> RunRequest:
    """G = len(micro_batches) unless given (then a manual boundary); every window holds these micro-batches; one
    rank; SGD lr 1/8."""
    g = len(micro_batches) if accumulation_steps is None else accumulation_steps
    engine = (EngineConfig(rank_count=1, accumulation_steps=g, boundary="automatic", step_after_every_backward=g > 1)
              if accumulation_steps is None else
              EngineConfig(rank_count=1, accumulation_steps=g, boundary="manual", step_after_every_backward=False))
    model = ModelSpec("linear", input_size=1, output_size=1, expert_count=1, frozen=("bias",))
    steps = [[[mb] for mb in micro_batches] for _ in range(windows)]
    scenario = Scenario(model, Aggregation(aggregation), OptimizerSpec("sgd", lr=LR), None, engine,
                        {"weight": [[0.0]], "bias": [[0.0]]}, {"weight": [[Fraction(0)]], "bias": [[Fraction(0)]]},
                        steps, None, 0)
    draft = RunRequest(request_id, "fp32", scenario, engine_calls(scenario))
    return RunRequest.from_json(draft.to_json())


def ranked_request(per_rank: list[list[list[Sequence]]], request_id: int) -> RunRequest:
    """One window on len(per_rank) ranks: per_rank[r][k] is micro-batch k of rank r; G = len(per_rank[0])."""
    g = len(per_rank[0])
    engine = EngineConfig(rank_count=len(per_rank), accumulation_steps=g, boundary="automatic",
                          step_after_every_backward=g > 1)
    model = ModelSpec("linear", input_size=1, output_size=1, expert_count=1, frozen=("bias",))
    steps = [[[rank[k] for rank in per_rank] for k in range(g)]]
    scenario = Scenario(model, Aggregation("token-mean"), OptimizerSpec("sgd", lr=LR), None, engine,
                        {"weight": [[0.0]], "bias": [[0.0]]}, {"weight": [[Fraction(0)]], "bias": [[Fraction(0)]]},
                        steps, None, 0)
    draft = RunRequest(request_id, "fp32", scenario, engine_calls(scenario))
    return RunRequest.from_json(draft.to_json())


def applied(reply: dict) -> list[float]:
    assert reply["type"] == "result", reply
    assert all(s["applied"] for s in reply["steps"])
    assert all(s["gradient"]["bias"] is None for s in reply["steps"])  # frozen
    return [s["gradient"]["weight"][0][0] for s in reply["steps"]]


A, B = 4, 8  # the gradients of micro-batch 0 (one valid token) and of each valid token of micro-batch 1 (three)


def requests() -> list[RunRequest]:
    """Every request the tests send, in one adapter process per release (each start imports transformers)."""
    return [
        request([micro_batch(A, 1), micro_batch(B, 3, masked=1)], windows=2, request_id=1),
        request([micro_batch(2, 2), micro_batch(4, 2, masked=2), micro_batch(12, 2)], request_id=2),
        request([micro_batch(1, 1)], accumulation_steps=2, request_id=3),  # one window of 1 micro-batch, G = 2
        request([micro_batch(1, 1), micro_batch(2, 1)], aggregation="sum", request_id=4),
        ranked_request([[micro_batch(A, 1)], [micro_batch(B, 3)]], request_id=5),
        ranked_request([[micro_batch(A, 1), micro_batch(B, 3)], [micro_batch(1, 1), micro_batch(1, 1)]],
                       request_id=6),
    ]


# Two ranks (worker.py processes, DDP over gloo). What each release applies, by its rule:
#   window token mean over every rank                 (4.54+: average_tokens_across_devices on by default)
#   each rank's window token mean, averaged by DDP     (4.46 - 4.53: the count per rank)
#   each rank's micro-batch means / G, averaged        (4.45)
# G = 1, rank 0 a on 1 token, rank 1 b on 3:  (a + 3 b) / 4 = 7 | (a + b) / 2 = 6 | 6
# G = 2, rank 0 [a on 1, b on 3], rank 1 [1 on 1, 1 on 1]:  (4 + 24 + 2) / 6 = 5 | (28 / 4 + 2 / 2) / 2 = 4
#   | ((4 + 8) / 2 + (1 + 1) / 2) / 2 = 7 / 2
TWO_RANKS = {"4.45.2": (6.0, 3.5), "4.46.3": (6.0, 4.0), "5.24.0": (7.0, 5.0)}


@pytest.fixture(scope="module", params=sorted(MEAN_OF_MEANS))
def replies(request: pytest.FixtureRequest) -> tuple[str, list[dict]]:
    version = request.param
    needs(version)
    return version, converse(version, *requests())


def test_unequal_token_counts(replies: tuple[str, list[dict]]) -> None:
    """a = 4 on 1 token, b = 8 on 3 tokens (and a masked one): 6 where each micro-batch's mean is divided by G,
    else the window token mean 7. Two windows: the second starts at w1 = -lr g0, where each token's gradient is
    w1 + c, so it is g0' = w1 + g0 (both rules weigh the tokens to a total weight of 1)."""
    version, (reply, *_) = replies
    token_mean = Fraction(A + 3 * B, 4)
    mean_of_means = Fraction(Fraction(A, 1) + Fraction(3 * B, 3), 2)
    assert (token_mean, mean_of_means) == (7, 6)
    want = mean_of_means if MEAN_OF_MEANS[version] else token_mean
    w1 = -LR * want
    assert applied(reply) == [float(want), float(want + w1)]
    assert reply["parameters"]["weight"] == [[float(w1 - LR * (want + w1))]]
    assert reply["parameters"]["bias"] == [[0.0]]
    assert reply["optimizer_state"]["step_count"] == {"weight": 2, "bias": 0}


def test_equal_token_counts(replies: tuple[str, list[dict]]) -> None:
    """Two valid tokens in each of G = 3 micro-batches (gradients 2, 4, 12): every rule gives the token mean 6."""
    _, (_, reply, *_) = replies
    assert applied(reply) == [6.0]


def test_refuses_what_the_trainer_cannot_run(replies: tuple[str, list[dict]]) -> None:
    """An uneven window and another aggregation are refused with a reason, not run wrongly."""
    _, (_, _, short, summed, *_) = replies
    for r in (short, summed):
        assert (r["type"], r["kind"]) == ("error", "unsupported"), r
    assert "G micro-batches" in short["message"] or "uneven_windows" in short["message"], short
    assert "sum" in summed["message"], summed


def test_two_ranks(replies: tuple[str, list[dict]]) -> None:
    """The per-rank count of 4.46 - 4.53 (catalogue section 3) against 4.54+'s count over every rank, on the real
    DDP loop: see TWO_RANKS."""
    version, (*_, one_window, two_micro_batches) = replies
    assert (applied(one_window)[0], applied(two_micro_batches)[0]) == TWO_RANKS[version]
    assert one_window["optimizer_state"]["step_count"] == {"weight": 1, "bias": 0}
