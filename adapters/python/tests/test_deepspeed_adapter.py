"""The real-DeepSpeed adapter (adapters/deepspeed) as a process, against each installed release: the catalogue's
reproducer (shared/bug-catalogue.md section 1.1) gives 101 where ZeRO-2 + offload drops micro-batch 1 (0.15.2 -
0.18.9) and 111 where it does not, the configurations the catalogue measured correct stay correct (ZeRO-3 with and
without offload among them, docs/upstream/README.md), and a checkpoint between steps changes nothing. Each release
needs scripts/deepspeed-env.sh; a missing one is skipped with the command that installs it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from fractions import Fraction

import pytest
from conftest import ADAPTERS, HAS_TORCH

sys.path.insert(0, str(ADAPTERS / "deepspeed"))

import catalogue
import release

from accumcheck_adapter import RunRequest, engine_calls

# The releases of adapters/deepspeed-*/adapter.json, and whether ZeRO-2 + offload drops micro-batch 1 at G = 3.
DROPS = {"0.15.1": False, "0.16.4": True, "0.17.6": True, "0.18.9": True, "0.19.0": False, "0.19.8": False}
# ZeRO-2 without offload keeps only the last micro-batch of a window in 0.17.6 - 0.18.2 (PR #7509, issue #7718;
# docs/upstream-notes.md 1.4.3): measured here on 0.17.6.
LAST_ONLY_WITHOUT_OFFLOAD = {"0.17.6"}
FRONT = ADAPTERS / "deepspeed" / "adapter.py"
HELLO = {"type": "hello", "id": 0, "protocol": 1, "client": "pytest"}


def needs(version: str):
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    if not release.installed(version):
        pytest.skip(f"needs DeepSpeed {version}: run ACCUMCHECK_DEEPSPEED_RELEASES={version} scripts/deepspeed-env.sh")


def converse(version: str, *requests, env: dict[str, str] | None = None) -> list[dict]:
    """Runs the adapter for one release over the handshake and these requests; returns the replies after hello."""
    lines = [HELLO, *(r.to_json() for r in requests), {"type": "shutdown"}]
    done = subprocess.run([sys.executable, str(FRONT), "--version", version], check=False, timeout=600,
                          input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr[-4000:]
    replies = [json.loads(x) for x in done.stdout.splitlines()]
    assert replies[0]["adapter"]["name"] == f"deepspeed-{version}"
    assert len(replies) == len(requests) + 1, done.stderr[-4000:]
    return replies[1:]


def weights(reply: dict) -> list[float]:
    assert reply["type"] == "result", reply
    return [s["gradient"]["weight"][0][0] for s in reply["steps"]]


def resumed_after_step_0(request):
    """The request with a checkpoint after window 0, resumed in a fresh engine."""
    request = dataclasses.replace(request, scenario=dataclasses.replace(request.scenario, checkpoint_after_step=0))
    return dataclasses.replace(request, calls=engine_calls(request.scenario))


@pytest.mark.parametrize("version", sorted(DROPS))
def test_the_catalogue_reproducer_on_each_release(version):
    needs(version)
    req = catalogue.request
    with_checkpoint = resumed_after_step_0(req(request_id=6))
    # ZeRO-3 in the same adapter process: one release start (most of the time) for all the cases.
    zero3 = (req(zero_stage=3, offload=False, request_id=7), req(zero_stage=3, request_id=8),
             resumed_after_step_0(req(zero_stage=3, request_id=9)))
    replies = converse(version,
                       req(request_id=1),                                            # ZeRO-2 + offload, G = 3
                       req(accumulation_steps=2, gradients=(1, 10), request_id=2),   # G = 2
                       req(zero_stage=1, request_id=3),                              # ZeRO-1 + offload
                       req(offload=False, request_id=4),                             # ZeRO-2 without offload
                       req(zero_stage=0, offload=False, request_id=5),               # ZeRO-0
                       with_checkpoint, *zero3, *bf16_requests())
    replies, bf16 = replies[:9], replies[9:]
    zero2_offload, g2, zero1_offload, zero2, zero0, resumed, zero3_plain, zero3_offload, zero3_resumed = (
        weights(r) for r in replies)
    check_bf16(version, bf16)
    # Window 1 starts from w = -g0 / 8, and each of its tokens' gradient is w + c.
    assert zero2_offload[0] == (101.0 if DROPS[version] else 111.0)
    assert zero2_offload[1] == (100000 + 1000 + 2 * -101 / 8 if DROPS[version] else 111000 + 3 * -111 / 8)
    assert g2 == [11.0, 11000 + 2 * -11 / 8]
    for correct in (zero1_offload, zero0, zero3_plain, zero3_offload, zero3_resumed):
        assert correct == [111.0, 111000 + 3 * -111 / 8]
    if version in LAST_ONLY_WITHOUT_OFFLOAD:
        assert zero2 == [100.0, 100000 - 100 / 8]
    else:
        assert zero2 == [111.0, 111000 + 3 * -111 / 8]
    assert resumed == zero2_offload
    assert replies[0]["steps"][0]["grad_norm"] == zero2_offload[0]   # the norm of the truncated sum
    assert replies[4]["steps"][0]["grad_norm"] is None               # ZeRO-0 keeps no norm
    for r in replies[6:]:                                            # ZeRO-3: the norm, the parameters, the state
        assert [s["grad_norm"] for s in r["steps"]] == weights(r)
        assert r["parameters"] == {"weight": [[-(111 + 111000 + 3 * -111 / 8) / 8]], "bias": [[0.0]]}
        assert r["optimizer_state"]["step_count"] == {"weight": 2, "bias": 0}


def bf16_requests():
    """Precision bf16 (one window: 1, 10, 100 and every partial sum are exact in bf16) in the stages the adapter
    runs it, and the two it refuses; asked in the catalogue test's adapter process (no second release start)."""
    req = catalogue.request
    return (req(precision="bf16", request_id=21),                                   # ZeRO-2 + offload
            req(precision="bf16", offload=False, request_id=22),                    # ZeRO-2
            req(precision="bf16", zero_stage=1, request_id=23),                     # ZeRO-1 + offload
            req(precision="bf16", zero_stage=3, offload=False, request_id=24),      # ZeRO-3
            req(precision="bf16", zero_stage=3, request_id=25),                     # ZeRO-3 + offload
            req(precision="bf16", zero_stage=0, offload=False, request_id=26),      # refused
            req(precision="bf16", zero_stage=1, offload=False, request_id=27))      # refused


def check_bf16(version, replies):
    """bf16 gives what fp32 gives: the drop of ZeRO-2 + offload where fp32 drops, ZeRO-2's last-only sum on 0.17.6,
    111 elsewhere; the parameters are the fp32 master weights (w = -g / 8), the norm the applied gradient's."""
    zero2_offload, zero2, *correct = replies[:5]
    expect = {id(zero2_offload): 101.0 if DROPS[version] else 111.0,
              id(zero2): 100.0 if version in LAST_ONLY_WITHOUT_OFFLOAD else 111.0}
    for reply in replies[:5]:
        g = expect.get(id(reply), 111.0)
        assert weights(reply) == [g], reply
        assert reply["steps"][0]["grad_norm"] == g
        assert reply["parameters"] == {"weight": [[-g / 8]], "bias": [[0.0]]}
    for reply in replies[5:]:
        assert reply["type"] == "error" and reply["kind"] == "unsupported", reply
        assert "precision bf16 with ZeRO stage" in reply["message"]


def test_two_ranks_drop_micro_batch_1_on_both():
    needs("0.16.4")
    (reply,) = converse("0.16.4", catalogue.request(rank_count=2))
    assert weights(reply) == [101101.0]  # rank 1's gradients are rank 0's times 1000; correct: 111111


def test_zero3_on_two_ranks():
    # 0.18.9 does not run ZeRO-1/2 on two ranks here (release.TWO_RANK_ZERO_FAILS); its ZeRO-3 does. The scalar
    # lies on rank 0, rank 1's partition is padding: the gather over ranks and the cut by partition are read.
    # One release only: a two-rank start costs about 50 s on two busy cores (0.17.6 and 0.19.8 measured the same).
    version = "0.18.9"
    needs(version)
    replies = converse(version, catalogue.request(zero_stage=3, offload=False, rank_count=2, request_id=1),
                       catalogue.request(zero_stage=3, rank_count=2, request_id=2))
    for reply in replies:
        assert weights(reply) == [111111.0]
        assert reply["steps"][0]["grad_norm"] == 111111.0
        assert reply["parameters"]["weight"] == [[-111111 / 8]]


def second_boundary_backward_on_two_ranks(request_id: int):
    """ZeRO-1 without offload on two ranks, G = 1 and two backwards before step(): DeepSpeed 0.17.6 raises
    TypeError on every rank at the second boundary backward (docs/deepspeed-adapter.md). Three trainable weights,
    so that neither rank's partition is only padding (release.EMPTY_PARTITION_FAILS)."""
    from accumcheck_adapter import ModelSpec, Scenario, Sequence
    from accumcheck_adapter.scenario import Aggregation, EngineConfig, OptimizerSpec

    def seq(y: int) -> Sequence:
        return Sequence([1], [[1.0, 2.0, 4.0]], [[float(y)]])

    scenario = Scenario(ModelSpec("linear", input_size=3, output_size=1, expert_count=1, frozen=("bias",)),
                        Aggregation("sum"), OptimizerSpec("sgd", lr=Fraction(1, 8), missing_gradient_is_zero=True),
                        None, EngineConfig(rank_count=2, accumulation_steps=1, zero_stage=1,
                                           step_after_every_backward=False),
                        {"weight": [[0.0, 0.0, 0.0]], "bias": [[0.0]]}, None,
                        [[[[seq(-1)], [seq(-10)]], [[seq(-100)], [seq(-1000)]]]], None, 0)
    draft = RunRequest(request_id, "fp32", scenario, engine_calls(scenario))
    return RunRequest.from_json(draft.to_json())


def test_a_pair_whose_ranks_raised_the_same_exception_is_kept(tmp_path):
    # A failure on every rank at the same line, with the process group still pairing its collectives, is the
    # training code's answer (the run is "failed", accumcheck's TargetRaised after its second attempt), not a
    # broken pair: no restart, which on 0.17.6 cost 0.17.6's differential campaign 40 s per such scenario.
    version = "0.17.6"
    needs(version)
    trace = tmp_path / "trace.jsonl"
    replies = converse(version, second_boundary_backward_on_two_ranks(1), second_boundary_backward_on_two_ranks(2),
                       catalogue.request(zero_stage=3, offload=False, rank_count=2, request_id=3),
                       env={"ACCUMCHECK_DEEPSPEED_TRACE": str(trace)})
    for reply in replies[:2]:
        assert reply["type"] == "error" and reply["kind"] == "failed", reply
        assert "TypeError" in reply["message"], reply
    assert weights(replies[2]) == [111111.0]
    outcomes = [json.loads(x)["outcome"] for x in trace.read_text().splitlines()]
    assert outcomes == ["RuntimeError", "RuntimeError", "result"], outcomes  # "fault" would mean a restart


def test_a_release_that_is_not_installed_is_refused_with_the_install_command():
    done = subprocess.run([sys.executable, str(FRONT), "--version", "0.0.1"], input="", capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert "ACCUMCHECK_DEEPSPEED_RELEASES=0.0.1 scripts/deepspeed-env.sh" in done.stderr
