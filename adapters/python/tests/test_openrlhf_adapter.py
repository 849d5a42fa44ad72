"""The real OpenRLHF SFT trainer over the real DeepSpeed it pins (adapters/openrlhf/adapter.py), one rank, fp32, on
two scenarios of one trainable scalar w (from 0), the token mean and DeepSpeed's AdamW. Measured, and asserted per
installed release (docs/openrlhf-adapter.md):
  - uneven micro-batches, G = 2, ZeRO-0: micro-batch 0 has one token of gradient 1, micro-batch 1 two tokens of
    gradients 10 and 0. The token mean is 11/3; 0.10.2 and 0.10.3 (one rank: the same count) apply the mean of the
    micro-batch means, (1 + 5) / 2 = 3; 0.10.4 applies 11/3.
  - the catalogue's scenario, G = 3, gradients 1, 10, 100, one token each, ZeRO-2 with the optimizer offloaded: the
    token mean is 111/3 = 37; DeepSpeed 0.18.9 (under 0.10.2 and 0.10.3) drops micro-batch 1: 101/3; DeepSpeed 0.19.1
    (under 0.10.4) applies 37.
SGD, and a micro-batch without a supervised token (0/0 in 0.10.2's loss), are refused as unsupported, naming why.
Each release needs scripts/openrlhf-env.sh (and its DeepSpeed, scripts/deepspeed-env.sh); a missing one is skipped
with the command that installs it.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from fractions import Fraction

import pytest
from conftest import ADAPTERS, HAS_TORCH

sys.path.insert(0, str(ADAPTERS / "deepspeed"))
import catalogue


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, ADAPTERS / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


deepspeed_release = _load("deepspeed_release_orl", "deepspeed/release.py")

# (release, its DeepSpeed, window 0 of the uneven scenario, window 0 of the catalogue's under ZeRO-2 + offload)
RELEASES = (("0.10.2", "0.18.9", Fraction(3), Fraction(101, 3)), ("0.10.3", "0.18.9", Fraction(3), Fraction(101, 3)),
            ("0.10.4", "0.19.1", Fraction(11, 3), Fraction(37)))
FRONT = ADAPTERS / "openrlhf" / "adapter.py"
HELLO = {"type": "hello", "id": 0, "protocol": 1, "client": "pytest"}


def adamw(msg: dict, kind: str = "adamw") -> dict:
    msg["scenario"]["training"]["aggregation"] = {"mode": "token-mean"}
    msg["scenario"]["training"]["optimizer"]["kind"] = kind
    return msg


def uneven(request_id: int) -> dict:
    """G = 2, ZeRO-0: micro-batch 1 of each window gets a second token whose gradient at w = 0 is 0."""
    msg = adamw(catalogue.request(accumulation_steps=2, gradients=(1, 10), zero_stage=0, offload=False,
                                  request_id=request_id).to_json())
    for part, zero in (("scenario", "0"), ("values", 0.0)):
        for window in msg[part]["steps"]:
            sequence = window[1][0][0]
            sequence["features"].append(copy.deepcopy(sequence["features"][0]))
            sequence["targets"].append([zero])
            if part == "scenario":
                sequence["loss_mask"].append(1)
    return msg


def empty_micro_batch(request_id: int) -> dict:
    msg = adamw(catalogue.request(accumulation_steps=2, gradients=(1, 10), zero_stage=0, offload=False,
                                  request_id=request_id).to_json())
    msg["scenario"]["steps"][0][1][0][0]["loss_mask"] = [0]
    return msg


def release_python(version: str) -> str | None:
    """The release's launcher (scripts/openrlhf-env.sh), else None."""
    launcher = ADAPTERS.parent / ".venv" / "openrlhf" / version / "bin" / "python"
    stamp = launcher.parent.parent / ".accumcheck-stamp"
    return str(launcher) if stamp.is_file() else None


@pytest.mark.parametrize(("version", "deepspeed", "means", "offload"), RELEASES,
                         ids=[f"{v}+{d}" for v, d, _, _ in RELEASES])
def test_openrlhf_applies_what_was_measured(version: str, deepspeed: str, means: Fraction, offload: Fraction) -> None:
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    if not deepspeed_release.installed(deepspeed):
        pytest.skip(f"needs DeepSpeed {deepspeed}: run ACCUMCHECK_DEEPSPEED_RELEASES={deepspeed} "
                    "scripts/deepspeed-env.sh")
    python = release_python(version)
    if python is None:
        pytest.skip(f"needs OpenRLHF {version}: run ACCUMCHECK_OPENRLHF_RELEASES={version} scripts/openrlhf-env.sh")
    runs = [uneven(1), adamw(catalogue.request(zero_stage=2, offload=True, request_id=2).to_json()),
            adamw(catalogue.request(zero_stage=1, offload=True, request_id=3).to_json(), "adam"),
            adamw(catalogue.request(zero_stage=2, offload=True, request_id=4).to_json(), "sgd"), empty_micro_batch(5)]
    lines = [HELLO, *runs, {"type": "shutdown"}]
    done = subprocess.run([python, str(FRONT), "--version", version, "--deepspeed", deepspeed], check=False,
                          timeout=600, input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    replies = [json.loads(x) for x in done.stdout.splitlines()]
    assert replies[0]["adapter"]["name"] == f"openrlhf-{version}+deepspeed-{deepspeed}"
    assert len(replies) == len(runs) + 1, done.stderr[-4000:]
    got = [[step["gradient"]["weight"][0][0] for step in reply["steps"]] for reply in replies[1:4]]
    assert got[0][0] == pytest.approx(float(means), rel=2e-7), got
    assert got[1][0] == pytest.approx(float(offload), rel=2e-7), got
    assert got[2][0] == pytest.approx(37, rel=2e-7), got  # ZeRO-1 with offload keeps every micro-batch
    for reply in replies[1:4]:
        # DeepSpeed's Adam moments after two steps, and its own step count.
        assert reply["optimizer_state"]["step_count"]["weight"] == 2, reply
        assert reply["optimizer_state"]["second_moment"]["weight"][0][0] > 0, reply
    assert replies[4]["type"] == "error" and replies[4]["kind"] == "unsupported", replies[4]
    assert "'sgd' is not in the adapter's" in replies[4]["message"]
    if version == "0.10.4":  # the window's count is 1: micro-batch 0's token alone
        assert replies[5]["steps"][0]["gradient"]["weight"][0][0] == pytest.approx(1, rel=2e-7), replies[5]
    else:
        assert replies[5]["type"] == "error" and replies[5]["kind"] == "unsupported", replies[5]
        assert "micro-batch 1 of window 0 has no supervised token" in replies[5]["message"], replies[5]


def test_a_missing_release_names_its_install_command(tmp_path) -> None:
    if not HAS_TORCH:
        pytest.skip("needs torch: run scripts/adapters-env.sh")
    if not deepspeed_release.installed("0.18.9"):
        pytest.skip("needs DeepSpeed 0.18.9: run ACCUMCHECK_DEEPSPEED_RELEASES=0.18.9 scripts/deepspeed-env.sh")
    (tmp_path / "deepspeed").symlink_to(deepspeed_release.venv_root())  # DeepSpeed there, no OpenRLHF
    done = subprocess.run([sys.executable, str(FRONT), "--version", "0.10.2", "--deepspeed", "0.18.9"], check=False,
                          timeout=120, capture_output=True, text=True, env={"ACCUMCHECK_VENV_DIR": str(tmp_path)})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "OpenRLHF 0.10.2 is not installed" in done.stderr, done.stderr[-2000:]
    assert "ACCUMCHECK_OPENRLHF_RELEASES=0.10.2 scripts/openrlhf-env.sh" in done.stderr
    assert done.stdout == ""
